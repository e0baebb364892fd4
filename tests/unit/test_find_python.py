"""scripts/find-python.sh: the first working Python of the versions asked for, in that order."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "find-python.sh"
HERE = f"{sys.version_info[0]}.{sys.version_info[1]}"


def find(*versions: str, **env: str) -> subprocess.CompletedProcess[str]:
    """Run the script with no Python on PATH and no pyenv: only the PYTHON<XY> given count."""
    return subprocess.run([shutil.which("bash") or "/bin/bash", str(SCRIPT), *versions],
                          capture_output=True, text=True, check=False,
                          env={"PATH": "/nonexistent", "PYENV_ROOT": "/nonexistent",
                               "HOME": "/nonexistent", **env})


def test_the_first_version_that_works_wins_and_later_ones_are_fallbacks():
    """The Django 6.1 stack asks for 3.13, then 3.12: 3.13 when there is one, else 3.12."""
    var = "PYTHON" + HERE.replace(".", "")
    missing = find("3.99", HERE, **{var: sys.executable})
    assert missing.returncode == 0 and missing.stdout.strip() == sys.executable
    first = find(HERE, "3.99", **{var: sys.executable})
    assert first.stdout.strip() == sys.executable


def test_no_version_found_names_every_version_asked_for():
    failed = find("3.98", "3.99")
    assert failed.returncode == 1
    assert "3.98 3.99" in failed.stderr and "PYTHON398=" in failed.stderr
    assert "PYTHON399=" in failed.stderr
