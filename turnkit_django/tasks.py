"""Celery tasks: thin wrappers over services. Celery is the doorbell; the database decides.

This is ``<app>/tasks.py``, so a project's ``app.autodiscover_tasks()`` finds it; nothing else is
needed for workers to know ``turnkit.run_turn``. (``turnkit_django.celery`` is the same module
under its first name.) Tasks are idempotent: a duplicate, late or lost message is harmless.

The module imports before Django is set up: a project's ``celery.py`` imports
:func:`beat_schedule` while its settings load, and :func:`beat_schedule` reads no setting until
beat runs. So the services (which need Django's app registry) are imported when a task runs.
"""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator, Mapping, MutableMapping
from contextlib import contextmanager
from datetime import timedelta
from types import FrameType
from typing import Any, TypedDict

from celery import current_task, shared_task
from celery.schedules import schedule
from celery.signals import worker_process_init, worker_shutting_down
from django.db import close_old_connections, connections

from .base import shutdown
from .conf import turnkit_settings


@shared_task(name="turnkit.run_turn", acks_late=True, reject_on_worker_lost=True,
             ignore_result=True)
def run_turn(turn_id: str) -> dict[str, object]:
    """Claim and execute a submitted turn if it is claimable; then one maintenance pass.

    Returns how the execution ended (``{"turn_id", "agent", "outcome", "steps", "duration"}``),
    which Celery's "succeeded" line shows; no result backend stores it (``ignore_result``)."""
    from .services.turns import run_submitted  # noqa: PLC0415 - see the module doc

    with _django_connections(), _graceful_sigterm():
        return run_submitted(turn_id).summary()


@shared_task(name="turnkit.maintain", ignore_result=True)
def maintain() -> None:
    """One bounded maintenance pass."""
    from .services import drain  # noqa: PLC0415 - see the module doc

    with _django_connections():
        drain()


@shared_task(name="turnkit.reconcile", ignore_result=True)
def reconcile() -> None:
    """Recover turns whose worker died, then one maintenance pass."""
    from .services import reconcile as run  # noqa: PLC0415 - see the module doc

    with _django_connections():
        run()


@shared_task(name="turnkit.cancel_sweep", ignore_result=True)
def cancel_sweep() -> None:
    """Finish large cascades: cancel active turns under cascade-cancelled parents."""
    from .services import cancel_sweep as run  # noqa: PLC0415 - see the module doc

    with _django_connections():
        run()


@shared_task(name="turnkit.schedules", ignore_result=True)
def fire_schedules() -> None:
    """Start one run for each due firing of each enabled schedule (``schedule()``)."""
    from .services.schedules import fire_schedules as run  # noqa: PLC0415 - see the module doc

    with _django_connections():
        run()


def enqueue_turn(turn_id: str) -> None:
    """The default dispatcher: send ``run_turn`` to the configured queue."""
    run_turn.apply_async(args=(turn_id,), queue=turnkit_settings.QUEUE)


@contextmanager
def _django_connections() -> Iterator[None]:
    """Django's connection lifecycle around a task in a worker, as around a request: a session
    past ``CONN_MAX_AGE``, or left unusable by an error, is closed before the task and after it,
    and the ``CONN_HEALTH_CHECKS`` check is due again before the task's first query.

    Celery's Django fixup closes every connection around every task unless ``CELERY_DB_REUSE_MAX``
    is set; then it manages none, and this keeps a kept session from outliving the database's
    end of it (docs/howto/celery.md, "Database connections"). Not for a call made in the
    caller's process (a direct call or ``apply()``): the caller owns those connections, perhaps
    inside a transaction."""
    request = current_task.request if current_task else None
    owned = (request is not None and not request.called_directly and not request.is_eager
             and not any(db.in_atomic_block for db in connections.all(initialized_only=True)))
    if owned:
        close_old_connections()
    try:
        yield
    finally:
        if owned:
            close_old_connections()


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


# --------------------------------------------------------------------------- beat


class ReconcileInterval(schedule):
    """Every ``TURNKIT["RECONCILE_INTERVAL"]`` seconds, read each time beat asks, never earlier."""

    def __init__(self, relative: bool = False, nowfun: Any = None, app: Any = None) -> None:
        super().__init__(None, relative, nowfun, app)

    @property
    def run_every(self) -> timedelta:
        return timedelta(seconds=turnkit_settings.RECONCILE_INTERVAL)

    @run_every.setter
    def run_every(self, value: Any) -> None:
        """Ignore assignments: the interval always comes from the setting."""

    def __reduce__(self) -> tuple[Any, ...]:  # beat's shelve pickles its entries
        nowfun: Any = getattr(self, "nowfun", None)
        return self.__class__, (self.relative, nowfun)

    def __repr__(self) -> str:
        return "<freq: TURNKIT['RECONCILE_INTERVAL']>"


class BeatOptions(MutableMapping[str, object]):
    """A beat entry's ``apply_async`` options, read from ``TURNKIT`` each time it is sent.

    The queue is ``QUEUE``; a message not taken within one interval expires (the next one is
    already on its way), so a stopped worker pool does not come back to a backlog of passes.
    Values set on it (``options["queue"] = "turnkit-maintenance"``) replace the setting's.
    """

    def __init__(self, overrides: Mapping[str, object] | None = None) -> None:
        self._overrides = dict(overrides or {})

    def _values(self) -> dict[str, object]:
        values: dict[str, object] = {} if {"queue", "expires"} <= set(self._overrides) else {
            "queue": turnkit_settings.QUEUE, "expires": turnkit_settings.RECONCILE_INTERVAL}
        return {**values, **self._overrides}

    def __getitem__(self, key: str) -> object:
        return self._values()[key]

    def __setitem__(self, key: str, value: object) -> None:
        self._overrides[key] = value

    def __delitem__(self, key: str) -> None:
        if key not in self._overrides:
            raise KeyError(key)
        del self._overrides[key]

    def __iter__(self) -> Iterator[str]:
        return iter(dict.fromkeys(["queue", "expires", *self._overrides]))

    def __len__(self) -> int:
        return len(dict.fromkeys(["queue", "expires", *self._overrides]))

    def copy(self) -> dict[str, object]:
        """A plain dict of the current values (beat copies the options of each entry it sends)."""
        return self._values()

    def __reduce__(self) -> tuple[object, ...]:
        return self.__class__, (self._overrides,)

    def __repr__(self) -> str:
        return f"<TURNKIT QUEUE and RECONCILE_INTERVAL, then {self._overrides!r}>"


class BeatEntry(TypedDict):
    """One entry of ``app.conf.beat_schedule``: the task's name, when, and how it is sent."""

    task: str
    schedule: ReconcileInterval
    options: BeatOptions


def beat_schedule() -> dict[str, BeatEntry]:
    """Entries to merge into ``app.conf.beat_schedule``; they read ``TURNKIT`` only when used.

    Safe to call at import time of a project's ``celery.py``: a bad ``TURNKIT`` is reported by
    ``manage.py check`` (and raises in beat), never here.
    """
    return {
        "turnkit-reconcile": {"task": "turnkit.reconcile", "schedule": ReconcileInterval(),
                              "options": BeatOptions()},
        "turnkit-cancel-sweep": {"task": "turnkit.cancel_sweep", "schedule": ReconcileInterval(),
                                 "options": BeatOptions()},
        "turnkit-schedules": {"task": "turnkit.schedules", "schedule": ReconcileInterval(),
                              "options": BeatOptions()},
    }
