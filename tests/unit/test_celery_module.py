"""The project Celery modules we document read no configuration when they are imported.

Reading ``app.conf`` at import loads the Django settings inside Celery's ``Settings.__getattr__``,
which turns any ``KeyError`` raised by the settings module (``os.environ["X"]`` unset) into a
misleading ``AttributeError: 'Settings' object has no attribute 'beat_schedule'``. The documented
modules merge turnkit's beat entries in ``app.on_after_configure`` instead.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.docpages import blocks

REPO = Path(__file__).resolve().parents[2]
DOCS = REPO / "docs"


def quickstart_celery_module() -> str:
    (block,) = [b for b in blocks(DOCS / "quickstart.md") if b.title == "myproject/celery.py"]
    return block.code


MODULES = {
    "quickstart": quickstart_celery_module,
    "example_project": lambda: (REPO / "example_project" / "celery.py").read_text(),
}


def project(tmp_path: Path, celery_module: str, settings: str) -> dict[str, str]:
    """A ``myproject`` package with the given Celery module and settings; the env to run it."""
    package = tmp_path / "myproject"
    package.mkdir()
    (package / "__init__.py").write_text("from .celery import app as celery_app\n")
    (package / "celery.py").write_text(celery_module)
    (package / "settings.py").write_text(settings)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)]),
           "DJANGO_SETTINGS_MODULE": "myproject.settings"}
    return env


def run(env: dict[str, str], script: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script)], env=env,
                          capture_output=True, text=True, timeout=120, check=False)


@pytest.mark.parametrize("name", sorted(MODULES))
def test_a_key_error_in_the_settings_surfaces_as_itself(name: str, tmp_path: Path) -> None:
    module = MODULES[name]().replace("example_project.settings", "myproject.settings")
    env = project(tmp_path, module, textwrap.dedent("""
        import os
        from tests.settings import *  # noqa
        SECRET_KEY = os.environ["TURNKIT_TEST_UNSET_VARIABLE"]
    """))
    env.pop("TURNKIT_TEST_UNSET_VARIABLE", None)
    done = run(env, """
        import django
        import myproject  # the package __init__ imports the Celery module
        django.setup()
    """)
    assert done.returncode == 1, done.stderr
    assert "KeyError: 'TURNKIT_TEST_UNSET_VARIABLE'" in done.stderr, done.stderr
    assert "AttributeError" not in done.stderr, done.stderr


@pytest.mark.parametrize("name", sorted(MODULES))
def test_the_beat_schedule_holds_turnkit_entries_once_configured(name: str,
                                                                 tmp_path: Path) -> None:
    module = MODULES[name]().replace("example_project.settings", "myproject.settings")
    env = project(tmp_path, module, textwrap.dedent("""
        from tests.settings import *  # noqa
        CELERY_BROKER_URL = "memory://"
        CELERY_BEAT_SCHEDULE = {"mine": {"task": "myproject.tick", "schedule": 60}}
    """))
    done = run(env, """
        from myproject.celery import app
        print(sorted(app.conf.beat_schedule))
        print(sorted(entry["task"] for entry in app.conf.beat_schedule.values()))
    """)
    assert done.returncode == 0, done.stderr
    names, tasks = done.stdout.splitlines()
    assert names == str(["mine", "turnkit-cancel-sweep", "turnkit-reconcile",
                         "turnkit-schedules"]), done.stdout
    assert "'turnkit.reconcile'" in tasks and "'turnkit.cancel_sweep'" in tasks


def test_no_page_reads_the_celery_configuration_at_import() -> None:
    pages = [*DOCS.rglob("*.md"), REPO / "example_project" / "celery.py"]
    offenders = [f"{page.relative_to(REPO)}:{number}" for page in pages
                 for number, line in enumerate(page.read_text().splitlines(), 1)
                 if line.startswith("app.conf.beat_schedule")]
    assert offenders == []
