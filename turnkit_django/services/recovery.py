"""Recovery and maintenance: reconcile turns whose worker died, and the bounded drain pass.

Heartbeats are stamped with the database's clock, so leases are measured on it too: a worker
host whose clock is skewed can neither be reclaimed early nor recovered late.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import timedelta

from django.db import transaction
from django.db.models import Subquery

from ..agents import get_agent
from ..conf import turnkit_settings
from ..events import emit
from ..exceptions import ConfigurationError
from ..models import Turn, Wait
from ..observability import metrics
from ..runtime.deliveries import callback_decision, deliver_pending, finished
from ..runtime.sources import source_tools
from ..runtime.submission import dispatch
from ..store import (
    Abandoned,
    DeadLettered,
    Recovered,
    TurnState,
    WaitRelease,
    abandon_prepared,
    count_failed_recovery,
    database_now,
    recover,
    release_waiter,
    touch_batch,
)
from ..store.compiled import CompiledRead
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


def _abandoned(outcome: Abandoned, report: ReconcileReport) -> None:
    """What follows an abandoned turn going ``stale``."""
    turn = outcome.turn
    report.stale.append(turn.pk)
    transaction.on_commit(lambda: log_recovery(turn, "stale", outcome.message))
    emit("turn.stale", turn_id=turn.pk, conversation_id=turn.conversation_id,
         started_at=turn.started_at)


def _dead_lettered(outcome: DeadLettered, report: ReconcileReport) -> None:
    """What follows a dead-letter (its callback and hand-on committed with it)."""
    turn = outcome.turn
    report.dead_lettered.append(turn.pk)
    transaction.on_commit(lambda: log_recovery(turn, "dead_lettered", outcome.cause))
    emit("turn.failed", turn_id=turn.pk, conversation_id=turn.conversation_id,
         started_at=turn.started_at, error=outcome.error)


def _callback_if_dead_lettered(turn_id: str) -> bool | None:
    """The callback decision a dead-letter of ``turn_id`` would need, asked before any lock."""
    turn = Turn.objects.filter(pk=turn_id).first()
    if turn is None or turn.recovery_attempts + 1 <= int(turnkit_settings.MAX_RECOVERY_ATTEMPTS):
        return None
    return callback_decision(turn)


def _finish(callback: bool | None) -> Callable[[Turn], object]:
    """The end of a dead-lettered submitted turn, in its transaction: its completion callback
    (as the policy decided before the lock) and its lane's hand-on."""
    return lambda turn: finished(turn, callback_allowed=callback)


def _recover(turn_id: str, report: ReconcileReport) -> None:
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    callback = _callback_if_dead_lettered(turn_id)
    outcome = recover(turn_id, cutoff, max_attempts=int(turnkit_settings.MAX_RECOVERY_ATTEMPTS),
                      replay_safe=_replay_safe_tools, finish=_finish(callback))
    if isinstance(outcome, Abandoned):
        _abandoned(outcome, report)
    elif isinstance(outcome, DeadLettered):
        _dead_lettered(outcome, report)
    elif isinstance(outcome, Recovered):
        turn, attempts = outcome.turn, outcome.attempts
        dispatch(turn.pk)
        metrics.turn_recovered()
        report.recovered.append(turn.pk)
        transaction.on_commit(lambda: log_recovery(
            turn, "recovered", f"its worker's lease expired (recovery attempt {attempts} of "
            f"{turnkit_settings.MAX_RECOVERY_ATTEMPTS})"))
        emit("turn.recovered", turn_id=turn.pk, conversation_id=turn.conversation_id,
             recovery_attempts=attempts)


def _recovery_failed(turn_id: str, exc: Exception, report: ReconcileReport) -> None:
    """Count a recovery that raised as an attempt; past the limit, dead-letter the turn."""
    logger.error("could not recover turn %r; counted as a recovery attempt", turn_id,
                 exc_info=exc)
    report.errors.append(turn_id)
    try:
        callback = _callback_if_dead_lettered(turn_id)
        outcome = count_failed_recovery(
            turn_id, f"{type(exc).__name__}: {exc}",
            max_attempts=int(turnkit_settings.MAX_RECOVERY_ATTEMPTS), finish=_finish(callback))
        if isinstance(outcome, DeadLettered):
            _dead_lettered(outcome, report)
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
        outcome = abandon_prepared(turn_id, root_id, cutoff, "the prepared turn was neither "
                                   f"executed nor submitted within TIMEOUT "
                                   f"({turnkit_settings.TIMEOUT}s)")
        if isinstance(outcome, Abandoned):
            _abandoned(outcome, report)


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
        if release_waiter(turn_id, root_id, rotate=rotate) is WaitRelease.RELEASED:
            dispatch(turn_id)
            released.append(turn_id)
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
        touch_batch(ids)
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
    tenant = Turn.objects.filter(pk=turn_id).values("tenant")[:1]
    ids = list(Turn.objects.lane_heads().filter(tenant=Subquery(tenant))
               .within_tenant_limit(limits.concurrency).order_by("submitted_at", "id")
               .values_list("pk", flat=True)[:limits.concurrency])
    for head in ids:
        dispatch(head)
    return ids


__all__ = ["ReconcileReport", "drain", "reconcile", "release_waiters_of", "release_waiting",
           "ring_tenant"]
