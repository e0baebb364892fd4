"""Settings of the throughput benchmark (its driver and its Celery workers): ``bench.settings``
with the default Celery dispatch, and database connections kept across tasks (``CONN_MAX_AGE``
with health checks, one of the two setups docs/howto/celery.md recommends)."""

from __future__ import annotations

import copy

from bench.settings import *  # noqa: F403
from bench.settings import DATABASES, TURNKIT

TURNKIT = {**TURNKIT, "DISPATCHER": None}  # turnkit_django.celery.enqueue_turn
DATABASES = copy.deepcopy(DATABASES)
DATABASES["default"]["CONN_MAX_AGE"] = 600
DATABASES["default"]["CONN_HEALTH_CHECKS"] = True
