"""A project on SQLite installs no PostgreSQL driver (README: "nothing beyond Django, your
database"): turnkit imports none itself, so every module loads without psycopg."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

PROGRAM = """
import sys
sys.modules["psycopg"] = None  # an import of it raises ImportError, as when not installed
sys.modules["psycopg2"] = None
import django
django.setup()
import turnkit_django.admin, turnkit_django.celery, turnkit_django.api.handles
import turnkit_django.runtime, turnkit_django.services, turnkit_django.console.views
from django.core.management import call_command
call_command("check")
print("loaded")
"""


def test_every_module_loads_and_checks_without_a_postgresql_driver():
    env = {k: v for k, v in os.environ.items() if k != "TURNKIT_TEST_DATABASE_URL"}
    env["DJANGO_SETTINGS_MODULE"] = "tests.settings"
    done = subprocess.run([sys.executable, "-c", PROGRAM], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.strip().endswith("loaded")
