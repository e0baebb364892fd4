"""Settings for the benchmarks: the test settings on the database in TURNKIT_BENCH_DATABASE_URL.

A ``postgres://`` URL, or ``sqlite:////absolute/path`` for a SQLite file (opened in IMMEDIATE
transaction mode, as the test suite's SQLite). Turns run in the benchmark's process: nothing is
sent to a broker (``bench.worker_settings`` is the variant with Celery).
"""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import _database_from_url

_url = os.environ.get("TURNKIT_BENCH_DATABASE_URL") or os.environ.get("TURNKIT_TEST_DATABASE_URL")
if not _url:
    raise SystemExit("set TURNKIT_BENCH_DATABASE_URL=postgres://... or sqlite:////path "
                     "(make bench does it for you)")
DATABASES = {"default": _database_from_url(_url)}
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    DATABASES["default"]["OPTIONS"] = {"transaction_mode": "IMMEDIATE"}
TURNKIT = {
    "DEFAULT_MODEL": "bench-model",
    "CLIENT": "turnkit_django.testing.ScriptedClient",
    "DISPATCHER": "bench.workload.no_dispatch",
    "HEARTBEAT_INTERVAL": 30,
    "LEASE": 120,
}
