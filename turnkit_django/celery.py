"""turnkit's Celery tasks under their first module name: an alias of ``turnkit_django.tasks``.

The names here are the same objects as there (``run_turn``, ``maintain``, ``reconcile``,
``cancel_sweep``, ``enqueue_turn``, ``beat_schedule``), so ``CELERY_IMPORTS =
["turnkit_django.celery"]`` and ``from turnkit_django.celery import beat_schedule`` keep working.
New projects need neither: ``app.autodiscover_tasks()`` finds ``turnkit_django.tasks``.
"""

from __future__ import annotations

from .tasks import (
    BeatOptions,
    ReconcileInterval,
    beat_schedule,
    cancel_sweep,
    enqueue_turn,
    fire_schedules,
    maintain,
    reconcile,
    run_turn,
)

__all__ = [
    "BeatOptions",
    "ReconcileInterval",
    "beat_schedule",
    "cancel_sweep",
    "enqueue_turn",
    "fire_schedules",
    "maintain",
    "reconcile",
    "run_turn",
]
