"""Recovery and maintenance: reconcile turns whose worker died, and the bounded drain pass.

Heartbeats are stamped with the database's clock, so leases are measured on it too: a worker
host whose clock is skewed can neither be reclaimed early nor recovered late.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import Subquery

from .. import failpoints, metrics
from ..agents import get_agent
from ..conf import turnkit_settings
from ..errors import ErrorRecord
from ..events import emit
from ..exceptions import ConfigurationError
from ..models import Turn, Wait
from ..runtime.deliveries import callback_decision, deliver_pending, finished
from ..runtime.sources import source_tools
from ..runtime.submission import dispatch
from ..states import TurnStatus
from ..store import TurnState, database_now, lease_of, lock_tree
from ..store.compiled import CompiledRead
from ..store.transcript import ClosedCall, interrupt_running
from ..store.turns import count_recovery, end, release, revoke, touch
from ..store.waits import join
from .approvals import expire_approvals
from .outcomes import log_recovery

logger = logging.getLogger("turnkit_django.services")


@dataclass
class ReconcileReport:
    recovered: list[str] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)
    #: Turns whose recovery raised: logged, counted as a recovery attempt, retried next pass.
    errors: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        text = (f"recovered {len(self.recovered)}, dead-lettered {len(self.dead_lettered)}, "
                f"stale {len(self.stale)}, dispatched {len(self.dispatched)}")
        return text + (f", {len(self.errors)} failed" if self.errors else "")


def _replay_safe_tools(turn: Turn) -> set[str]:
    try:
        agent = get_agent(turn.agent_name)
    except ConfigurationError:
        return set()
    table = agent.tool_table()
    if agent.tool_sources:  # the tools its sources offered, as the turn recorded them
        table.update(source_tools(agent, TurnState.from_json(turn.state).listed_tools, table))
    return {name for name, t in table.items() if t.replay_safe}


def _interrupted(turn: Turn, closed: list[ClosedCall]) -> None:
    """The events of calls a recovery or a repair closed: the results it wrote."""
    for call in closed:
        if call.interrupted:
            emit("tool_call.interrupted", turn_id=turn.pk, conversation_id=turn.conversation_id,
                 id=call.call_id, name=call.name, tool_execution_id=call.execution_id)
        emit("message.created", turn_id=turn.pk, conversation_id=turn.conversation_id,
             message_id=call.message_id, role="tool", kind="tool_result")


def _abandon(turn: Turn, message: str, report: ReconcileReport) -> None:
    """Make an inline turn nobody will finish ``stale``; the caller holds its tree lock."""
    _interrupted(turn, end(turn, "abandon", reason="abandoned inline turn",
                           repair_reason="the turn was abandoned",
                           error=ErrorRecord("Stale", message).for_turn()))
    report.stale.append(turn.pk)
    transaction.on_commit(lambda: log_recovery(turn, "stale", message))
    emit("turn.stale", turn_id=turn.pk, conversation_id=turn.conversation_id,
         started_at=turn.started_at)


def _callback_if_dead_lettered(turn_id: str) -> bool | None:
    """The callback decision a dead-letter of ``turn_id`` would need, asked before any lock."""
    turn = Turn.objects.filter(pk=turn_id).first()
    if turn is None or turn.recovery_attempts + 1 <= int(turnkit_settings.MAX_RECOVERY_ATTEMPTS):
        return None
    return callback_decision(turn)


def _recover(turn_id: str, report: ReconcileReport) -> None:
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    callback = _callback_if_dead_lettered(turn_id)
    with transaction.atomic():
        row = Turn.objects.filter(pk=turn_id).values("root_turn_id").first()
        if row is None:
            return
        lock_tree(row["root_turn_id"])
        turn = Turn.objects.get(pk=turn_id)
        beat = lease_of(turn_id)
        if turn.status != TurnStatus.RUNNING or (beat is not None and beat >= cutoff):
            return
        failpoints.hit("recover_turn")
        metrics.lease_expired()
        if turn.submitted_at is None:
            _abandon(turn, "the inline execution was abandoned", report)
            return
        attempts = turn.recovery_attempts + 1
        _interrupted(turn, interrupt_running(turn, replay_safe=_replay_safe_tools(turn)))
        if attempts > int(turnkit_settings.MAX_RECOVERY_ATTEMPTS):
            _dead_letter(turn, attempts, f"the turn lost its worker {attempts} times",
                         report, callback_allowed=callback)
            return
        revoke(turn, "requeue", reason="lease expired", recovery_attempts=attempts)
        dispatch(turn.pk)
        metrics.turn_recovered()
        report.recovered.append(turn.pk)
        transaction.on_commit(lambda: log_recovery(
            turn, "recovered", f"its worker's lease expired (recovery attempt {attempts} of "
            f"{turnkit_settings.MAX_RECOVERY_ATTEMPTS})"))
        emit("turn.recovered", turn_id=turn.pk, conversation_id=turn.conversation_id,
             recovery_attempts=attempts)


def _dead_letter(turn: Turn, attempts: int, cause: str, report: ReconcileReport, *,
                 callback_allowed: bool | None) -> None:
    """Fail a turn that recovery gave up on; the caller holds its tree lock (and asked the
    policy about its callback before taking it)."""
    error = ErrorRecord("DeadLetter", f"{cause}; dead-lettered",
                        {"recovery_attempts": attempts}).for_turn()
    end(turn, "dead_letter", reason="dead-letter", repair_reason="the turn was dead-lettered",
        error=error, recovery_attempts=attempts)
    finished(turn, callback_allowed=callback_allowed)  # commits with the dead-letter
    report.dead_lettered.append(turn.pk)
    transaction.on_commit(lambda: log_recovery(turn, "dead_lettered", cause))
    emit("turn.failed", turn_id=turn.pk, conversation_id=turn.conversation_id,
         started_at=turn.started_at, error=error)


def _recovery_failed(turn_id: str, exc: Exception, report: ReconcileReport) -> None:
    """Count a recovery that raised as an attempt; past the limit, dead-letter the turn."""
    logger.error("could not recover turn %r; counted as a recovery attempt", turn_id,
                 exc_info=exc)
    report.errors.append(turn_id)
    try:
        callback = _callback_if_dead_lettered(turn_id)
        with transaction.atomic():
            root_id = Turn.objects.filter(pk=turn_id).values_list("root_turn_id",
                                                                  flat=True).first()
            if root_id is None:
                return
            lock_tree(root_id)
            turn = Turn.objects.filter(pk=turn_id).running().first()
            if turn is None:
                return
            attempts = turn.recovery_attempts + 1
            if attempts > int(turnkit_settings.MAX_RECOVERY_ATTEMPTS):
                _dead_letter(turn, attempts, f"its recovery failed {attempts} times "
                             f"({type(exc).__name__}: {exc})", report,
                             callback_allowed=callback)
            else:
                count_recovery(turn, attempts)
    except Exception:
        logger.exception("could not record the failed recovery of turn %r", turn_id)


def reconcile() -> ReconcileReport:
    """Recover running turns whose heartbeat is older than LEASE, then run one maintenance pass."""
    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    report = ReconcileReport()
    stale_ids = list(Turn.objects.lease_expired(cutoff).values_list("pk", flat=True)[:batch])
    for turn_id in stale_ids:
        try:
            _recover(turn_id, report)
        except Exception as exc:
            _recovery_failed(turn_id, exc, report)
    _abandon_prepared(batch, report)
    report.dispatched.extend(drain())
    return report


def _abandon_prepared(batch: int, report: ReconcileReport) -> None:
    """Prepared turns neither executed nor submitted within TIMEOUT of their creation go
    ``stale``: nothing will run them, and they would keep their conversation busy forever."""
    if not turnkit_settings.TIMEOUT:
        return
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.TIMEOUT))
    for turn_id, root_id in (Turn.objects.prepared().filter(updated_at__lt=cutoff)
                             .order_by("updated_at").values_list("pk", "root_turn_id")[:batch]):
        with transaction.atomic():
            lock_tree(root_id)
            turn = Turn.objects.prepared().filter(pk=turn_id, updated_at__lt=cutoff).first()
            if turn is not None:
                _abandon(turn, "the prepared turn was neither executed nor submitted within "
                               f"TIMEOUT ({turnkit_settings.TIMEOUT}s)", report)


def release_waiting(batch: int) -> list[str]:
    """Move waiting turns whose targets all finished, or whose deadline passed, to pending."""
    waiting = list(Turn.objects.actionable().waiting().order_by("updated_at")
                   .values_list("pk", "root_turn_id")[:batch])
    return _release(waiting, rotate=True)


def release_waiters_of(turn_id: str) -> list[str]:
    """Release the turns waiting for ``turn_id`` (which just finished) that wait for nothing
    else; one query when none waits for it."""
    return _release([(str(waiter), str(root)) for waiter, root in _WAITERS.rows(turn_id)],
                    rotate=False)


#: The read every finished background turn makes, compiled once per process.
_WAITERS = CompiledRead(lambda turn_id: Wait.objects.filter(target_id=turn_id).order_by(
    "pk").values_list("waiter_id", "waiter__root_turn_id"), 1)


def _release(waiting: list[tuple[str, str]], *, rotate: bool) -> list[str]:
    released: list[str] = []
    for turn_id, root_id in waiting:
        with transaction.atomic():
            now = lock_tree(root_id).now
            turn = Turn.objects.filter(pk=turn_id).waiting().first()
            if turn is None:
                continue
            expired = turn.deadline_at is not None and turn.deadline_at <= now
            if expired or not Wait.objects.filter(waiter_id=turn_id).unmet().exists():
                release(turn)
                # A released waiter that never started gets the joined results as its input
                # (a suspended turn resumes through its own tool results).
                if not expired and turn.started_at is None:
                    join(turn)
                dispatch(turn_id)
                released.append(turn_id)
            elif rotate:
                touch([turn_id])  # a blocked batch rotates behind the others (fair rotation)
    return released


def drain() -> list[str]:
    """One bounded maintenance pass: deny expired approvals, release waiters, re-ring turns
    that lost their doorbell.

    Reads only active rows (the partial actionable index), at most MAINTENANCE_BATCH_SIZE of
    them per query, oldest-touched first, and touches what it handled so the next pass rotates.
    """
    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    deliver_pending(batch)
    expire_approvals()
    release_waiting(batch)
    quiet = database_now() - timedelta(seconds=float(turnkit_settings.RECONCILE_INTERVAL))
    # Ring only the head of each conversation's lane: a turn queued behind a busy or older turn
    # cannot be claimed anyway, and the lane hands over to it when its predecessor finishes.
    # A turn its tenant's limit keeps pending is not rung either: the end of a running turn of
    # that tenant rings it (ring_tenant), or a later pass once the tenant has a free place.
    heads = Turn.objects.lane_heads().filter(updated_at__lt=quiet)
    if (limits := turnkit_settings.TENANT_LIMITS) is not None:
        heads = heads.within_tenant_limit(limits.concurrency)
    ids = list(heads.order_by("updated_at").values_list("pk", flat=True)[:batch])
    if ids:
        with transaction.atomic():
            touch(ids)
            for turn_id in ids:
                dispatch(turn_id)
    return ids


def ring_tenant(turn_id: str) -> list[str]:
    """After the run of ``turn_id`` ended (completed, failed, waiting, lost): ring the oldest
    pending turns of its tenant that ``TENANT_LIMITS`` kept pending, as many as the tenant now
    has free places, so its queue drains ``concurrency`` at a time without waiting for
    maintenance. One read (none without TENANT_LIMITS); a ring that loses a race to another is
    refused by the claim and rung again by maintenance."""
    limits = turnkit_settings.TENANT_LIMITS
    if limits is None:
        return []
    tenant = Turn.objects.filter(pk=turn_id).values("tenant")
    ids = list(Turn.objects.lane_heads().filter(tenant=Subquery(tenant))
               .within_tenant_limit(limits.concurrency).order_by("submitted_at", "id")
               .values_list("pk", flat=True)[:limits.concurrency])
    for head in ids:
        dispatch(head)
    return ids


__all__ = ["ReconcileReport", "drain", "reconcile", "release_waiters_of", "release_waiting",
           "ring_tenant"]
