"""Celery tasks: thin wrappers over services. Celery is the doorbell; the database decides.

Load this module in your Celery app: ``CELERY_IMPORTS = ["turnkit_django.celery"]`` (or
``app.conf.imports``); ``autodiscover_tasks()`` only finds modules named ``tasks``.
Tasks are idempotent: a duplicate, late or lost message is harmless.

The tasks import the services when they run, not at the top: a project's Celery module imports
this one (for ``beat_schedule()``) while Django's settings load, before the app registry is ready.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any

from celery import shared_task
from celery.signals import worker_process_init, worker_shutting_down

from . import shutdown
from .conf import turnkit_settings


@shared_task(name="turnkit.run_turn", acks_late=True, reject_on_worker_lost=True,
             ignore_result=True)
def run_turn(turn_id: str) -> None:
    """Claim and execute a submitted turn if it is claimable; then one maintenance pass."""
    from .services import run_turn as run  # noqa: PLC0415 - see the module doc

    with _graceful_sigterm():
        run(turn_id)


@shared_task(name="turnkit.maintain", ignore_result=True)
def maintain() -> None:
    """One bounded maintenance pass."""
    from .services import drain  # noqa: PLC0415 - see the module doc

    drain()


@shared_task(name="turnkit.reconcile", ignore_result=True)
def reconcile() -> None:
    """Recover turns whose worker died, then one maintenance pass."""
    from .services import reconcile as run  # noqa: PLC0415 - see the module doc

    run()


@shared_task(name="turnkit.cancel_sweep", ignore_result=True)
def cancel_sweep() -> None:
    """Finish large cascades: cancel active turns under cascade-cancelled parents."""
    from .services import cancel_sweep as run  # noqa: PLC0415 - see the module doc

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


# --------------------------------------------------------------------------- warm shutdown

_pool_child = False  # set in prefork pool children
_terminated = False  # SIGTERM arrived while a turn ran


@worker_shutting_down.connect(dispatch_uid="turnkit.shutdown")
def _on_warm_shutdown(**kwargs: Any) -> None:
    """The worker stops: turns running in its own process (solo and threads pools) hand
    themselves back at their next step boundary."""
    shutdown.request_stop()


@worker_process_init.connect(dispatch_uid="turnkit.pool_child")
def _on_pool_child(**kwargs: Any) -> None:
    global _pool_child
    _pool_child = True


@contextmanager
def _graceful_sigterm() -> Iterator[None]:
    """In a prefork pool child, SIGTERM during a turn (systemd's ``KillMode=control-group``
    signals the children too) finishes the current step and hands the turn back instead of
    killing a tool midway; the child then exits as the signal asked."""
    global _terminated
    if not _pool_child:
        yield
        return
    previous = signal.signal(signal.SIGTERM, _on_sigterm)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
        if _terminated:
            os.kill(os.getpid(), signal.SIGTERM)  # now handled as the pool expects


def _on_sigterm(signum: int, frame: FrameType | None) -> None:
    global _terminated
    _terminated = True
    shutdown.request_stop()
