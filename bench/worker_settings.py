"""Settings of the throughput benchmark (its driver and its Celery workers): ``bench.settings``
with the default Celery dispatch, and each worker process's database session kept across tasks
as docs/howto/celery.md ("Database connections") shows: ``CONN_MAX_AGE`` with health checks,
and ``CELERY_DB_REUSE_MAX`` (bench/celery_app.py) so that Celery's Django fixup does not close
it around every task. ``BENCH_NEW_SESSION_PER_TASK=1`` measures Celery's default instead."""

from __future__ import annotations

import copy
import os

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES, TURNKIT

TURNKIT = {**TURNKIT, "DISPATCHER": None}  # turnkit_django.celery.enqueue_turn
DATABASES = copy.deepcopy(DATABASES)
DATABASES["default"]["CONN_MAX_AGE"] = 600
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
#: Read by Celery's Django fixup through bench/celery_app.py.
CELERY_DB_REUSE_MAX = None if os.environ.get("BENCH_NEW_SESSION_PER_TASK") == "1" else 1000

if os.environ.get("BENCH_POOL_MAX_SIZE"):
    # The in-flight benchmark (bench/inflight.py): Django's connection pool (psycopg's), which
    # takes no persistent connections; Celery's fixup closes (hands back) a task's at its end.
    DATABASES["default"]["CONN_MAX_AGE"] = 0
    DATABASES["default"]["CONN_HEALTH_CHECKS"] = False
    DATABASES["default"]["OPTIONS"] = {**DATABASES["default"].get("OPTIONS", {}), "pool": {
        "min_size": 1, "max_size": int(os.environ["BENCH_POOL_MAX_SIZE"]), "timeout": 120}}
    CELERY_DB_REUSE_MAX = None


def tenant_of(principal: object) -> str | None:
    """The tenants benchmark's tenant key (bench/tenants.py): the principal's ``tenant``."""
    return principal.get("tenant") if isinstance(principal, dict) else None


if os.environ.get("BENCH_TENANT_CONCURRENCY"):
    # The tenants benchmark (bench/tenants.py), in its driver and its worker alike.
    TURNKIT = {**TURNKIT, "TENANT_LIMITS": {
        "key": "bench.worker_settings.tenant_of",
        "concurrency": int(os.environ["BENCH_TENANT_CONCURRENCY"])}}

if os.environ.get("BENCH_LEASE"):
    # The kill benchmark (bench/kill.py), in its driver and its workers alike: a lease of seconds
    # (as tests/e2e/worker_settings.py), so that a SIGKILLed worker's turns are recovered soon.
    TURNKIT = {**TURNKIT, "LEASE": float(os.environ["BENCH_LEASE"]),
               "HEARTBEAT_INTERVAL": float(os.environ.get("BENCH_HEARTBEAT", "2")),
               "RECONCILE_INTERVAL": 1.0, "MAINTENANCE_BATCH_SIZE": 1000}
