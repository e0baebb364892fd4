"""The state changes of recovery and maintenance, each one transaction under the tree lock.

Each function finds the turn's root, locks the tree, reads the turn again, checks it and changes
it, and says what it did with a typed outcome. The caller (``services.recovery``) composes them
and does what follows the commit: rings doorbells, logs, counts, emits the turn's event. What a
higher layer must decide inside the transaction is passed in: the tools that are replay-safe
(``replay_safe``) and the end of a dead-lettered submitted turn (``finish``: its completion
callback and its lane's hand-on, which commit with the dead-letter).
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime

from django.db import transaction

from ..base import failpoints
from ..base.error_records import ErrorRecord
from ..base.serialization import JsonObject
from ..base.states import TurnStatus
from ..events import emit
from ..models import Turn, Wait
from ..observability import metrics
from .claims import lease_of
from .locks import lock_tree
from .transcript import ClosedCall, interrupt_running
from .turns import count_recovery, end, release, revoke, touch
from .waits import join


@dataclass(frozen=True)
class Skipped:
    """Nothing to do: the turn is gone, no longer in the state looked for, or alive again."""


@dataclass(frozen=True)
class Recovered:
    """A submitted turn whose worker died was requeued (its caller dispatches it)."""

    turn: Turn
    attempts: int


@dataclass(frozen=True)
class DeadLettered:
    """A turn recovery gave up on failed with ``error`` (a ``DeadLetter``)."""

    turn: Turn
    attempts: int
    cause: str
    error: JsonObject


@dataclass(frozen=True)
class Abandoned:
    """A turn nothing will run (an abandoned inline or prepared turn) went ``stale``."""

    turn: Turn
    message: str


@dataclass(frozen=True)
class Counted:
    """A recovery that failed was counted as an attempt; the turn stays running."""

    turn: Turn
    attempts: int


SKIPPED = Skipped()

Recovery = Recovered | DeadLettered | Abandoned | Skipped


class WaitRelease(enum.Enum):
    """What :func:`release_waiter` did to a waiting turn."""

    RELEASED = "released"  # back to pending (its caller dispatches it)
    BLOCKED = "blocked"  # still waits for a target
    GONE = "gone"  # no longer waiting


def _interrupted(turn: Turn, closed: list[ClosedCall]) -> None:
    """The events of calls a recovery or a repair closed: the results it wrote."""
    for call in closed:
        if call.interrupted:
            emit("tool_call.interrupted", turn_id=turn.pk, conversation_id=turn.conversation_id,
                 id=call.call_id, name=call.name, tool_execution_id=call.execution_id)
        emit("message.created", turn_id=turn.pk, conversation_id=turn.conversation_id,
             message_id=call.message_id, role="tool", kind="tool_result")


def _abandon(turn: Turn, message: str) -> Abandoned:
    """Make an inline turn nobody will finish ``stale``; the caller holds its tree lock."""
    _interrupted(turn, end(turn, "abandon", reason="abandoned inline turn",
                           repair_reason="the turn was abandoned",
                           error=ErrorRecord("Stale", message).for_turn()))
    return Abandoned(turn, message)


def _dead_letter(turn: Turn, attempts: int, cause: str,
                 finish: Callable[[Turn], object]) -> DeadLettered:
    """Fail a turn that recovery gave up on; the caller holds its tree lock."""
    error = ErrorRecord("DeadLetter", f"{cause}; dead-lettered",
                        {"recovery_attempts": attempts}).for_turn()
    end(turn, "dead_letter", reason="dead-letter", repair_reason="the turn was dead-lettered",
        error=error, recovery_attempts=attempts)
    finish(turn)  # commits with the dead-letter
    return DeadLettered(turn, attempts, cause, error)


def recover(turn_id: str, cutoff: datetime, *, max_attempts: int,
            replay_safe: Callable[[Turn], set[str]],
            finish: Callable[[Turn], object]) -> Recovery:
    """Recover a running turn whose heartbeat is older than ``cutoff``: an inline one is
    abandoned; a submitted one has its running tool calls closed (``replay_safe(turn)`` names
    the tools that may run again) and is requeued, or dead-lettered (``finish(turn)`` in the
    same transaction) past ``max_attempts`` recoveries."""
    with transaction.atomic():
        row = Turn.objects.filter(pk=turn_id).values("root_turn_id").first()
        if row is None:
            return SKIPPED
        lock_tree(row["root_turn_id"])
        turn = Turn.objects.get(pk=turn_id)
        beat = lease_of(turn_id)
        if turn.status != TurnStatus.RUNNING or (beat is not None and beat >= cutoff):
            return SKIPPED
        failpoints.hit("recover_turn")
        metrics.lease_expired()
        if turn.submitted_at is None:
            return _abandon(turn, "the inline execution was abandoned")
        attempts = turn.recovery_attempts + 1
        _interrupted(turn, interrupt_running(turn, replay_safe=replay_safe(turn)))
        if attempts > max_attempts:
            return _dead_letter(turn, attempts, f"the turn lost its worker {attempts} times",
                                finish)
        revoke(turn, "requeue", reason="lease expired", recovery_attempts=attempts)
        return Recovered(turn, attempts)


def count_failed_recovery(turn_id: str, failure: str, *, max_attempts: int,
                          finish: Callable[[Turn], object]) -> Counted | DeadLettered | Skipped:
    """Count a recovery of a running turn that raised (``failure``) as an attempt; past
    ``max_attempts``, dead-letter the turn (``finish(turn)`` in the same transaction)."""
    with transaction.atomic():
        root_id = Turn.objects.filter(pk=turn_id).values_list("root_turn_id", flat=True).first()
        if root_id is None:
            return SKIPPED
        lock_tree(root_id)
        turn = Turn.objects.filter(pk=turn_id).running().first()
        if turn is None:
            return SKIPPED
        attempts = turn.recovery_attempts + 1
        if attempts > max_attempts:
            return _dead_letter(turn, attempts, f"its recovery failed {attempts} times "
                                f"({failure})", finish)
        count_recovery(turn, attempts)
        return Counted(turn, attempts)


def abandon_prepared(turn_id: str, root_id: str, cutoff: datetime,
                     message: str) -> Abandoned | Skipped:
    """Make a prepared turn not touched since ``cutoff`` ``stale`` (with ``message``)."""
    with transaction.atomic():
        lock_tree(root_id)
        turn = Turn.objects.prepared().filter(pk=turn_id, updated_at__lt=cutoff).first()
        if turn is None:
            return SKIPPED
        return _abandon(turn, message)


def release_waiter(turn_id: str, root_id: str, *, rotate: bool) -> WaitRelease:
    """Move a waiting turn whose targets all finished, or whose deadline passed, to pending (a
    waiter that never started gets the joined results as its input); ``rotate``: touch one that
    still waits, so a blocked batch rotates behind the others."""
    with transaction.atomic():
        now = lock_tree(root_id).now
        turn = Turn.objects.filter(pk=turn_id).waiting().first()
        if turn is None:
            return WaitRelease.GONE
        expired = turn.deadline_at is not None and turn.deadline_at <= now
        if expired or not Wait.objects.filter(waiter_id=turn_id).unmet().exists():
            release(turn)
            # A released waiter that never started gets the joined results as its input
            # (a suspended turn resumes through its own tool results).
            if not expired and turn.started_at is None:
                join(turn)
            return WaitRelease.RELEASED
        if rotate:
            touch([turn_id])  # a blocked batch rotates behind the others (fair rotation)
        return WaitRelease.BLOCKED


def touch_batch(turn_ids: Sequence[str]) -> None:
    """Mark turns as just inspected, in a transaction of their own (see :func:`.turns.touch`)."""
    with transaction.atomic():
        touch(turn_ids)


__all__ = ["SKIPPED", "Abandoned", "Counted", "DeadLettered", "Recovered", "Recovery",
           "Skipped", "WaitRelease", "abandon_prepared", "count_failed_recovery", "recover",
           "release_waiter", "touch_batch"]
