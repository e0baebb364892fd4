"""Turns as use cases: create, submit, and run a submitted turn (what the Celery task does)."""

from __future__ import annotations

import time

from ..conf import turnkit_settings
from ..runtime import execute
from ..runtime.creation import new_conversation, new_turn
from ..runtime.submission import dispatch, submit
from .outcomes import TurnOutcome, log_outcome, outcome_of
from .recovery import drain, release_waiters_of, ring_tenant


def run_turn(turn_id: str, *, kind: str = "celery") -> bool:
    """Execute a submitted turn if it is claimable, release what waited for it, and run
    maintenance when it is due; true if this call ran the turn.

    The turn's terminal write has already handed its lane on (the next queued turn rung, or the
    idle conversation woken) and created its completion callback; when the hand-off read
    after the commit, it read the waiters too. How the execution ended is logged, one line
    (:mod:`.outcomes`); :func:`run_submitted` returns it.
    """
    return run_submitted(turn_id, kind=kind).ran


def run_submitted(turn_id: str, *, kind: str = "celery") -> TurnOutcome:
    """:func:`run_turn`, returning how the execution ended (what the Celery task returns)."""
    started = time.monotonic()
    executed = execute(turn_id, kind=kind)
    outcome = outcome_of(turn_id, executed, time.monotonic() - started)
    log_outcome(outcome)
    if executed and executed.waited_for is not False:  # unless its hand-off read none
        release_waiters_of(turn_id)
    if executed.ran:  # its tenant has a free place again (TENANT_LIMITS)
        ring_tenant(turn_id)
    maintain_when_due()
    return outcome


class _Maintenance:
    """When this process runs its next maintenance pass after a turn (``time.monotonic()``)."""

    due_at = 0.0


def maintain_when_due() -> None:
    """Run a maintenance pass (:func:`~.recovery.drain`) if this process ran none in the last
    ``RECONCILE_INTERVAL`` seconds.

    The beat runs maintenance on that schedule too; the pass after a turn shortens the wait for
    what the beat would find (a lost doorbell, an undelivered callback) on a busy worker without
    paying a pass per turn. A local rate limit, not a lease or a deadline: no database clock.
    """
    now = time.monotonic()
    if now < _Maintenance.due_at:
        return
    _Maintenance.due_at = now + float(turnkit_settings.RECONCILE_INTERVAL)
    drain()


__all__ = ["dispatch", "maintain_when_due", "new_conversation", "new_turn",
           "run_submitted", "run_turn", "submit"]
