"""Settings for the benchmarks: the test settings on the database in TURNKIT_BENCH_DATABASE_URL."""

from __future__ import annotations

import os

from tests.settings import *  # noqa: F403
from tests.settings import _database_from_url

_url = os.environ.get("TURNKIT_BENCH_DATABASE_URL") or os.environ.get("TURNKIT_TEST_DATABASE_URL")
if not _url:
    raise SystemExit("set TURNKIT_BENCH_DATABASE_URL=postgres://... (make bench does it for you)")
DATABASES = {"default": _database_from_url(_url)}
TURNKIT = {
    "DEFAULT_MODEL": "bench-model",
    "CLIENT": "turnkit_django.testing.ScriptedClient",
    "DISPATCHER": "bench.step_overhead.no_dispatch",
    "HEARTBEAT_INTERVAL": 30,
    "LEASE": 120,
}
