"""Celery tasks: thin wrappers over services. Celery is the doorbell; the database decides.

Load this module in your Celery app: ``CELERY_IMPORTS = ["turnkit_django.celery"]`` (or
``app.conf.imports``); ``autodiscover_tasks()`` only finds modules named ``tasks``.
Tasks are idempotent: a duplicate, late or lost message is harmless.

The tasks import the services when they run, not at the top: a project's Celery module imports
this one (for ``beat_schedule()``) while Django's settings load, before the app registry is ready.
"""

from __future__ import annotations

from typing import Any

from celery import shared_task

from .conf import turnkit_settings


@shared_task(name="turnkit.run_turn", acks_late=True, reject_on_worker_lost=True,
             ignore_result=True)
def run_turn(turn_id: str) -> None:
    """Claim and execute a submitted turn if it is claimable; then one maintenance pass."""
    from .services import run_turn as run

    run(turn_id)


@shared_task(name="turnkit.maintain", ignore_result=True)
def maintain() -> None:
    """One bounded maintenance pass."""
    from .services import drain

    drain()


@shared_task(name="turnkit.reconcile", ignore_result=True)
def reconcile() -> None:
    """Recover turns whose worker died, then one maintenance pass."""
    from .services import reconcile as run

    run()


@shared_task(name="turnkit.cancel_sweep", ignore_result=True)
def cancel_sweep() -> None:
    """Finish large cascades: cancel active turns under cascade-cancelled parents."""
    from .services import cancel_sweep as run

    run()


def enqueue_turn(turn_id: str) -> None:
    """The default dispatcher: send ``run_turn`` to the configured queue."""
    run_turn.apply_async(args=(turn_id,), queue=turnkit_settings.QUEUE)


def beat_schedule() -> dict[str, dict[str, Any]]:
    """Entries to merge into ``app.conf.beat_schedule``."""
    interval = float(turnkit_settings.RECONCILE_INTERVAL)
    queue = turnkit_settings.QUEUE
    return {
        "turnkit-reconcile": {"task": "turnkit.reconcile", "schedule": interval,
                              "options": {"queue": queue, "expires": interval}},
        "turnkit-cancel-sweep": {"task": "turnkit.cancel_sweep", "schedule": interval,
                                 "options": {"queue": queue, "expires": interval}},
    }
