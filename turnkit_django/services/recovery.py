"""Recovery and maintenance: reconcile turns whose worker died, and the bounded drain pass.

Heartbeats are stamped with the database's clock, so leases are measured on it too: a worker
host whose clock is skewed can neither be reclaimed early nor recovered late.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from ..agents import get_agent
from ..conf import turnkit_settings
from ..errors import ErrorRecord
from ..events import emit
from ..exceptions import ConfigurationError
from ..models import Turn, Wait
from ..runtime.deliveries import deliver_pending, finished
from ..runtime.submission import dispatch
from ..store import database_now, lock_tree
from ..store.transcript import ClosedCall, interrupt_running
from ..store.turns import end, release, revoke, touch
from ..store.waits import join

logger = logging.getLogger("turnkit_django.services")


@dataclass
class ReconcileReport:
    recovered: list[str] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (f"recovered {len(self.recovered)}, dead-lettered {len(self.dead_lettered)}, "
                f"stale {len(self.stale)}, dispatched {len(self.dispatched)}")


def _replay_safe_tools(agent_name: str) -> set[str]:
    try:
        agent = get_agent(agent_name)
    except ConfigurationError:
        return set()
    return {name for name, t in agent.tool_table().items() if t.replay_safe}


def _interrupted(turn: Turn, closed: list[ClosedCall]) -> None:
    for call in closed:
        if call.interrupted:
            emit("tool_call.interrupted", turn_id=turn.pk, conversation_id=turn.conversation_id,
                 id=call.call_id, name=call.name, tool_execution_id=call.execution_id)


def _recover(turn_id: str, report: ReconcileReport) -> None:
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    with transaction.atomic():
        row = Turn.objects.filter(pk=turn_id).values("root_turn_id").first()
        if row is None:
            return
        lock_tree(row["root_turn_id"])
        turn = Turn.objects.get(pk=turn_id)
        if turn.status != "running" or (turn.heartbeat_at and turn.heartbeat_at >= cutoff):
            return
        if turn.submitted_at is None:
            end(turn, "abandon", reason="abandoned inline turn",
                repair_reason="the turn was abandoned",
                error=ErrorRecord("Stale", "the inline execution was abandoned").for_turn())
            report.stale.append(turn.pk)
            emit("turn.stale", turn_id=turn.pk, conversation_id=turn.conversation_id)
            return
        attempts = turn.recovery_attempts + 1
        _interrupted(turn, interrupt_running(turn, replay_safe=_replay_safe_tools(
            turn.agent_name)))
        if attempts > int(turnkit_settings.MAX_RECOVERY_ATTEMPTS):
            error = ErrorRecord("DeadLetter",
                                f"the turn lost its worker {attempts} times; dead-lettered",
                                {"recovery_attempts": attempts}).for_turn()
            end(turn, "dead_letter", reason="dead-letter", repair_reason="the turn was "
                "dead-lettered", error=error, recovery_attempts=attempts)
            finished(turn.pk)  # callback and wake commit with the dead-letter
            report.dead_lettered.append(turn.pk)
            emit("turn.failed", turn_id=turn.pk, conversation_id=turn.conversation_id,
                 error=error)
            return
        revoke(turn, "requeue", reason="lease expired", recovery_attempts=attempts)
        dispatch(turn.pk)
        report.recovered.append(turn.pk)
        emit("turn.recovered", turn_id=turn.pk, conversation_id=turn.conversation_id,
             recovery_attempts=attempts)


def reconcile() -> ReconcileReport:
    """Recover running turns whose heartbeat is older than LEASE, then run one maintenance pass."""
    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    report = ReconcileReport()
    stale_ids = list(Turn.objects.lease_expired(cutoff).order_by("heartbeat_at")
                     .values_list("pk", flat=True)[:batch])
    for turn_id in stale_ids:
        _recover(turn_id, report)
    report.dispatched.extend(drain())
    return report


def release_waiting(batch: int) -> list[str]:
    """Move waiting turns whose targets all finished, or whose deadline passed, to pending."""
    released: list[str] = []
    waiting = list(Turn.objects.actionable().waiting().order_by("updated_at")
                   .values_list("pk", "root_turn_id")[:batch])
    for turn_id, root_id in waiting:
        with transaction.atomic():
            lock_tree(root_id)
            turn = Turn.objects.filter(pk=turn_id).waiting().first()
            if turn is None:
                continue
            expired = turn.deadline_at is not None and turn.deadline_at <= timezone.now()
            if expired or not Wait.objects.filter(waiter_id=turn_id).unmet().exists():
                release(turn)
                # A released waiter that never started gets the joined results as its input
                # (a suspended turn resumes through its own tool results).
                if not expired and turn.started_at is None:
                    join(turn)
                dispatch(turn_id)
                released.append(turn_id)
            else:
                touch([turn_id])  # a blocked batch rotates behind the others (fair rotation)
    return released


def drain() -> list[str]:
    """One bounded maintenance pass: release waiters, re-ring turns that lost their doorbell.

    Reads only active rows (the partial actionable index), at most MAINTENANCE_BATCH_SIZE of
    them per query, oldest-touched first, and touches what it handled so the next pass rotates.
    """
    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    deliver_pending(batch)
    release_waiting(batch)
    quiet = database_now() - timedelta(seconds=float(turnkit_settings.RECONCILE_INTERVAL))
    # Ring only the head of each conversation's lane: a turn queued behind a busy or older turn
    # cannot be claimed anyway, and the lane hands over to it when its predecessor finishes.
    ids = list(Turn.objects.lane_heads().filter(updated_at__lt=quiet).order_by("updated_at")
               .values_list("pk", flat=True)[:batch])
    if ids:
        with transaction.atomic():
            touch(ids)
            for turn_id in ids:
                dispatch(turn_id)
    return ids


__all__ = ["ReconcileReport", "drain", "reconcile", "release_waiting"]
