"""The heartbeat of a claimed turn: its lease kept fresh while it executes.

One thread per process beats for every turn the process executes (:class:`Heartbeat` enters a
claim into its schedule and takes it out again), started the first time a turn needs it and
again in a forked child (a Celery prefork worker): a turn no longer pays a thread's start and
join. The thread treats its database session as Django treats a request's: after each beat it is
closed when ``CONN_MAX_AGE`` says so (at once with Django's default of 0) or when an error left
it unusable, and otherwise kept for the next beat. It is closed as soon as no turn is left to
beat for, so no session of it outlives the turns it beats for.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable

from ..exceptions import LostClaim
from ..store import Claim, heartbeat, heartbeat_all
from ..store.connections import (
    close_old_sessions,
    close_session,
    holds_session,
    in_transaction,
    open_session,
)

logger = logging.getLogger("turnkit_django.runtime")


class Heartbeat:
    """Keeps the claim's heartbeat fresh every ``interval`` seconds while the block runs;
    stops on LostClaim or exit, and when ``overdue()`` says the call in flight should no
    longer keep the turn alive (then the lease expires and reconcile treats the turn like a
    dead worker's). No beat of the claim is in flight once the block has exited."""

    def __init__(self, claim: Claim, interval: float,
                 overdue: Callable[[], str | None] = lambda: None) -> None:
        self.claim = claim
        self.interval = interval
        self.overdue = overdue
        self.due = 0.0  # time.monotonic() of the next beat
        self._beating = threading.Lock()  # held while a beat of this claim is in flight
        self._stopped = False

    def __enter__(self) -> Heartbeat:
        self.due = time.monotonic() + self.interval
        _schedule.add(self)
        return self

    def __exit__(self, *exc: object) -> None:
        _schedule.discard(self)
        with self._beating:  # a beat in flight ends first
            self._stopped = True

    def beat(self) -> None:
        """One beat, on the heartbeat thread (its session kept only as ``CONN_MAX_AGE``
        allows), its session taken before the claim's lock (see :func:`beat_all`)."""
        open_session()
        with self._beating:
            if self._stopped:
                return
            self.due = time.monotonic() + self.interval
            try:
                reason = self.overdue()
                if reason is not None:
                    logger.warning("turn %r: %s; its lease is no longer renewed",
                                   self.claim.turn_id, reason)
                    self._stop()
                    return
                heartbeat(self.claim)
            except LostClaim:
                self._stop()
            except Exception:
                logger.exception("heartbeat failed for turn %r", self.claim.turn_id)
            finally:
                close_old_sessions()

    def _stop(self) -> None:
        self._stopped = True
        _schedule.discard(self)


def beat_all(beats: list[Heartbeat]) -> None:
    """One beat of every claim in ``beats`` that is due, in one statement for all of them
    (store.heartbeat_all): a process holding a thousand live turns sends one heartbeat
    statement per interval, not a thousand. Each claim's own lock is held meanwhile, so no beat
    of a claim is in flight once its turn's block has exited.

    The session is taken before any claim's lock: a turn that ends waits for its claim's lock
    holding its own session, so a beat that waited for a pooled session under that lock would
    deadlock with it until the pool's timeout once the turns held every session."""
    held: list[Heartbeat] = []
    try:
        open_session()
        for beat in beats:
            beat._beating.acquire()
            if beat._stopped:
                beat._beating.release()
                continue
            held.append(beat)
            beat.due = time.monotonic() + beat.interval
            try:
                reason = beat.overdue()
            except Exception:
                logger.exception("heartbeat failed for turn %r", beat.claim.turn_id)
                continue
            if reason is not None:
                logger.warning("turn %r: %s; its lease is no longer renewed",
                               beat.claim.turn_id, reason)
                beat._stop()
        live = [beat for beat in held if not beat._stopped]
        try:
            lost = heartbeat_all([beat.claim for beat in live])
        except Exception:
            logger.exception("heartbeat failed for turns %r",
                             [beat.claim.turn_id for beat in live])
            lost = set()
        for beat in live:
            if beat.claim.turn_id in lost:
                beat._stop()
    finally:
        for beat in held:
            beat._beating.release()
        if not in_transaction():  # the heartbeat thread's own session, never a caller's
            close_old_sessions()


class _Schedule:
    """The claims this process beats for, and the one thread that beats them when due.

    A turn's start and end wake the thread only when it must act sooner than it planned to: a
    new claim is due an interval from now, after the claims already in the schedule, and once
    the last claim is out the thread still wakes once, an interval later, before it waits for
    good. Turns that follow one another (an inline run after another, a worker's next task)
    enter and leave the schedule without a thread switch; only a session the thread holds when
    its last claim goes makes the thread wake at once, to close it."""

    def __init__(self) -> None:
        self._changed = threading.Condition()
        self._beats: set[Heartbeat] = set()
        self._thread: threading.Thread | None = None
        self._wake_at: float | None = None  # when the waiting thread wakes; None: when told
        self._session = False  # the thread holds a database session
        self._last_interval = 0.0
        self.wakes = 0  # the times the thread woke: told to, or at its planned time

    def add(self, beat: Heartbeat) -> None:
        with self._changed:
            self._beats.add(beat)
            self._last_interval = beat.interval
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="turnkit-heartbeat",
                                                daemon=True)
                self._thread.start()
            elif self._wake_at is None or beat.due < self._wake_at:
                self._changed.notify()

    def discard(self, beat: Heartbeat) -> None:
        with self._changed:
            self._beats.discard(beat)
            if not self._beats and self._session:  # the last one out: its session closes
                self._changed.notify()

    def _run(self) -> None:
        linger = False  # the last claim went: wake once more an interval later
        while True:
            with self._changed:
                while True:
                    now = time.monotonic()
                    self._session = holds_session()
                    due = [beat for beat in self._beats if beat.due <= now]
                    idle = not self._beats and self._session
                    if due or idle:
                        self._wake_at = now  # busy: it looks at the schedule again after
                        break
                    if self._beats:
                        linger = True
                        self._wake_at = min(beat.due for beat in self._beats)
                    elif linger:
                        linger = False
                        self._wake_at = now + self._last_interval
                    else:
                        self._wake_at = None
                    self._changed.wait(None if self._wake_at is None else self._wake_at - now)
                    self.wakes += 1
            # Outside the lock: a turn starts or ends without waiting for the database.
            if idle:  # no turn left to beat for: its session goes too
                close_session()
            if due:
                beat_all(due)


_schedule = _Schedule()


def _forked() -> None:
    """In a forked child the parent's thread does not exist (and its lock may be held)."""
    global _schedule
    _schedule = _Schedule()


os.register_at_fork(after_in_child=_forked)


__all__ = ["Heartbeat", "beat_all"]
