"""The Celery app of the throughput benchmark: ``celery -A bench.celery_app worker``.

Broker: the Redis in ``TURNKIT_BENCH_REDIS_URL``. The settings the e2e tier and the docs
recommend (late ack, reject on worker lost, prefetch 1, JSON only, no result backend, the
database session kept across tasks); the turnkit tasks and the bare task (``bench.tasks``) share
the one queue.
"""

from __future__ import annotations

import os

from celery import Celery
from django.conf import settings

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.worker_settings")

QUEUE = "turnkit"

app = Celery("turnkit_bench", include=["turnkit_django.celery", "bench.tasks"])
app.conf.update(
    broker_url=os.environ.get("TURNKIT_BENCH_REDIS_URL", "memory://"),
    broker_connection_retry_on_startup=True,
    task_acks_late=True,
    task_reject_on_worker_lost=True,
    task_ignore_result=True,
    task_serializer="json",
    accept_content=["json"],
    task_default_queue=QUEUE,
    worker_prefetch_multiplier=1,
)
# The fixup reads this one under its old name; the project's settings decide it
# (bench/worker_settings.py), as `config_from_object("django.conf:settings",
# namespace="CELERY")` would take it from a project's settings.
app.conf.CELERY_DB_REUSE_MAX = getattr(settings, "CELERY_DB_REUSE_MAX", None)
app.set_default()
