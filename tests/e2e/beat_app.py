"""``celery -A tests.e2e.beat_app beat``: the e2e Celery app with turnkit's beat entries.

The same app as the workers' (``tests.celery_app``), plus ``beat_schedule()``: reconcile, cancel
sweep and the schedules' tick, each every ``RECONCILE_INTERVAL`` (1 s in the e2e settings).
"""

from __future__ import annotations

from tests.celery_app import app
from turnkit_django.celery import beat_schedule

app.conf.beat_schedule = beat_schedule()

__all__ = ["app"]
