"""Django settings of the e2e tier's worker processes (and the TURNKIT timings the tests share).

``tests.settings`` plus: the PostgreSQL database pytest-django created for the session
(``TURNKIT_E2E_DATABASE_NAME``, set by the harness), its ``OPTIONS`` (statements prepared, as
docs/howto/deployment.md recommends), connections closed after each task (kept
across tasks instead with ``TURNKIT_E2E_KEEP_CONNECTIONS=1``, docs/howto/celery.md),
``application_name`` naming the worker (so hygiene checks and operators can see who holds what),
and short timings so leases expire in seconds. ``TURNKIT_E2E_TENANT_LIMIT=N`` sets
``TENANT_LIMITS`` (the tenant of a principal: its ``"tenant"`` entry) with concurrency N.
"""

from __future__ import annotations

import copy
import json
import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES, TURNKIT

# Shared with the test process (tests/e2e/conftest.py applies the same dict there).
E2E_TURNKIT = {
    **TURNKIT,
    "HEARTBEAT_INTERVAL": 0.3,
    "LEASE": 2.5,
    "RECONCILE_INTERVAL": 1.0,
    "MAX_RECOVERY_ATTEMPTS": 2,
    "MAINTENANCE_BATCH_SIZE": 100,
    # The parity scenarios' priced models (tests/testapp/parity_agents.py): $1 an input token.
    "COST_RATES": {"e2e-priced": {"input": "1000000", "output": "0"},
                   "e2e-judge": {"input": "1", "output": "1"}},
}
TURNKIT = E2E_TURNKIT
if os.environ.get("TURNKIT_E2E_PROVIDER_LIMITS"):  # tests/e2e/test_provider_waits.py
    TURNKIT = {**TURNKIT, "PROVIDER_LIMITS": json.loads(os.environ["TURNKIT_E2E_PROVIDER_LIMITS"]),
               "LIMITS_REDIS_URL": os.environ["TURNKIT_TEST_REDIS_URL"]}
if os.environ.get("TURNKIT_E2E_SPANS"):  # tests/e2e/test_tracing.py (tests/testapp/span_file.py)
    TURNKIT = {**TURNKIT, "TRACING": True}


def tenant_of(principal: object) -> str | None:
    """The ``TENANT_LIMITS`` key of an e2e principal: its ``"tenant"`` entry."""
    return principal.get("tenant") if isinstance(principal, dict) else None


def tenant_limits(concurrency: int) -> dict[str, object]:
    """``TENANT_LIMITS`` of the e2e tier: at most ``concurrency`` running turns per tenant."""
    return {"key": "tests.e2e.worker_settings.tenant_of", "concurrency": concurrency}


if os.environ.get("TURNKIT_E2E_TENANT_LIMIT"):
    _tenant_limit = int(os.environ["TURNKIT_E2E_TENANT_LIMIT"])
    TURNKIT = {**TURNKIT, "TENANT_LIMITS": tenant_limits(_tenant_limit)}

# Uploads and generated images: one directory for the test process and every worker.
MEDIA_ROOT = os.environ.get("TURNKIT_E2E_MEDIA_ROOT", "")
# For Celery modules configured from Django settings (tests/e2e/autodiscover_celery.py).
CELERY_BROKER_URL = os.environ.get("TURNKIT_TEST_REDIS_URL", "memory://")

DATABASES = copy.deepcopy(DATABASES)
_default = DATABASES["default"]
if os.environ.get("TURNKIT_E2E_DATABASE_NAME"):
    _default["NAME"] = os.environ["TURNKIT_E2E_DATABASE_NAME"]
_default["CONN_MAX_AGE"] = 0
if _default["ENGINE"] == "django.db.backends.postgresql":
    _default["OPTIONS"] = {  # the tests' own (prepared statements, as the docs recommend)
        **_default.get("OPTIONS", {}),
        "application_name": "turnkit-e2e-" + os.environ.get("TURNKIT_E2E_WORKER", "process"),
        "connect_timeout": 5,
    }

if os.environ.get("TURNKIT_E2E_DB_POOL"):
    # Django's connection pool (psycopg's), at most this many sessions per worker process.
    _default["OPTIONS"] = {**_default.get("OPTIONS", {}), "pool": {
        "min_size": 1, "max_size": int(os.environ["TURNKIT_E2E_DB_POOL"]), "timeout": 60}}

if os.environ.get("TURNKIT_E2E_KEEP_CONNECTIONS"):
    # docs/howto/celery.md, "Database connections": the worker keeps its session across tasks.
    _default["CONN_MAX_AGE"] = 600
    _default["CONN_HEALTH_CHECKS"] = True
    CELERY_DB_REUSE_MAX = 1000
