"""``make demo`` installs the ``demo`` extra only: it must cover what example_project imports.

Every third-party module imported by example_project/ (and by the turnkit_django modules it
loads, which import only the core dependencies unless guarded) belongs to a distribution named
by the core dependencies or the ``demo`` extra; the Makefile's demo target installs that extra,
not the test, lint or docs tools.
"""

from __future__ import annotations

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
OURS = {"example_project", "turnkit_django"}


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~ ;]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def _imported(folder: Path) -> set[str]:
    found: set[str] = set()
    for path in folder.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                found.update(alias.name.split(".")[0] for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                found.add(node.module.split(".")[0])
    return found - set(sys.stdlib_module_names) - OURS - {"__future__"}


def test_the_demo_extra_covers_what_example_project_imports() -> None:
    project = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]
    allowed = {_name(r) for r in [*project["dependencies"],
                                  *project["optional-dependencies"]["demo"]]}
    owners = packages_distributions()
    missing = {module: owners.get(module) for module in _imported(REPO / "example_project")
               if not {_name(d) for d in owners.get(module, [])} & allowed}
    assert not missing, f"add these to the demo extra in pyproject.toml: {missing}"


def test_make_demo_installs_the_demo_extra_not_the_test_tools() -> None:
    makefile = (REPO / "Makefile").read_text()
    assert "--editable '.[demo]'" in makefile
    target = re.search(r"^demo: (.*)$", makefile, re.M)
    assert target and "venv-demo" in target[1], "make demo must not need the full install"
