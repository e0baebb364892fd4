"""Cancellation: stop a turn, and with ``cascade=True`` every descendant, for good.

Under the tree lock, for each turn it changes: running tool executions become ``interrupted``
("outcome unknown") and every open tool call gets a result (transcript repair: a call that
never started, one parked for approval included, is "not executed", and its approval request
becomes ``cancelled``), the status becomes
``cancelled`` with an error record and ``completed_at``, and the fence is incremented, so a worker
still executing the turn (an in-flight model call, a tool still running) can never write again.
Then completion callbacks are created, the affected conversations are woken (buffered deliveries
get their continuation) and the next turn of each lane is dispatched.

Authorization: the ``cancel`` action is asked for the target and for EVERY descendant the call
will change, before any change; one denial raises :class:`AuthorizationError` and writes nothing.
Descendants past the batch are not asked about (nor loaded: the tree walk reads five columns):
the sweep cancels them as part of the cascade the call was authorized for.
A descendant is asked about with ``turn_principal`` set to the TARGET's principal: a continuation
acting for another principal (woken by a delivery from this tree) is cancelled with the tree
that caused it and whose budget it spends.

Bounded work: one call changes at most ``MAINTENANCE_BATCH_SIZE`` descendants, plus those
running on a worker (only the fence move stops them; a claim check does not). Every turn
cancelled by a cascade records ``options["cancel_cascade"] = True``, and :func:`cancel_sweep`
(the beat task ``turnkit.cancel_sweep``) cancels active turns whose parent carries that mark, so a
large cascade finishes over a few passes. Descendants the sweep could not find that way (an
active turn under an already-finished intermediate turn) are always handled by the call itself.

Idempotence: cancelling a finished turn changes nothing, so cancelling twice is a no-op. The one
exception is an escalation: ``cancel(cascade=True)`` on a turn that an earlier plain cancel left
``cancelled`` cancels its still-active descendants (an operator's "Cancel" then "Cancel with
descendants" does what it says).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from django.db import transaction
from django.db.models import Q

from ..arguments import flag
from ..authorization import authorize
from ..conf import turnkit_settings
from ..errors import ErrorRecord
from ..events import emit
from ..models import Delivery, Turn
from ..runtime.deliveries import callback_decision, completion_callback, deliver, hand_on
from ..serialization import json_safe, unstorable
from ..states import ACTIVE_TURN_STATUSES, TurnStatus
from ..store import controls, lock_tree
from ..store.deliveries import COMPLETION_PREFIX
from ..store.events import record_event
from ..store.turns import end, set_options

logger = logging.getLogger("turnkit_django.cancel")

REASON = "the turn was cancelled"


@dataclass
class CancelReport:
    """What one cancel call changed."""

    turn_id: str
    cascade: bool
    status: str = ""
    cancelled: list[str] = field(default_factory=list)
    #: Active descendants left for :func:`cancel_sweep` (the cascade was larger than one batch).
    remaining: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.cancelled)

    def __str__(self) -> str:
        text = f"cancelled {len(self.cancelled)} turn(s)"
        if self.remaining:
            text += f"; {self.remaining} descendant(s) left for cancel_sweep"
        return text


def _error(principal: Any, target_id: str, *, cascade: bool, ancestor: bool) -> ErrorRecord:
    message = (f"cancelled with its ancestor turn {target_id!r}" if ancestor
               else "cancelled by the application")
    return ErrorRecord("Cancelled", message, {"cancelled_turn": target_id, "cascade": cascade,
                                              "by": json_safe(principal)})


@dataclass(frozen=True)
class _Node:
    """A descendant as the tree walk reads it: its id and status, never the whole row."""

    pk: str
    status: str


def _descendants(target: Turn, *, marked: bool) -> tuple[list[_Node], list[_Node]]:
    """Active descendants, parents before children: (unreachable by the sweep, the rest).

    Descendants are children through parent links and, for a root, the root-level tasks of its
    tree (continuations that joined it). The sweep finds an active turn through its parent's
    (or, for a root-level task, its root's) ``cancel_cascade`` mark, so a turn above which the
    mark is missing (``marked`` False for the target: it finished without being cancelled)
    must be cancelled by the call itself. One query per level, reading five columns: finished
    descendants are walked through (an active turn may hang under one) but never loaded.
    """
    above = {target.pk} if marked else set()
    unreachable: list[_Node] = []
    reachable: list[_Node] = []
    frontier = [target.pk]
    tree_members = Q(root_turn_id=target.pk, parent_turn__isnull=True) & ~Q(pk=target.pk)
    while frontier:
        found = Q(parent_turn_id__in=frontier)
        if frontier == [target.pk] and target.is_root:
            found |= tree_members
        children = list(Turn.objects.filter(found).order_by("created_at", "id").values_list(
            "pk", "parent_turn_id", "root_turn_id", "status", "options__cancel_cascade"))
        frontier = [pk for pk, *_ in children]
        for pk, parent_id, root_id, status, cascade_mark in children:
            if status in ACTIVE_TURN_STATUSES:
                up = parent_id or root_id
                (reachable if up in above else unreachable).append(_Node(pk, status))
                above.add(pk)
            elif status == TurnStatus.CANCELLED and cascade_mark:
                above.add(pk)
    return unreachable, reachable


def _authorize(rows: Iterable[Turn], principal: Any, target: Turn, cascade: bool) -> None:
    """Ask ``cancel`` for each turn; a descendant is asked about as the target's.

    A descendant's owner, for a cancel, is the target's principal: a cascade reaches every
    descendant (P7), and one acting for another principal (a continuation a delivery from this
    tree woke in that principal's conversation, and its children) is in the tree because the
    tree caused it, and it spends the tree's budget. Asking about it with its own principal made
    the canceller's whole cascade fail (tenant 1 could not cancel its own run). The target is
    always asked about with its own principal, so nobody cancels another's turn directly.
    """
    for row in rows:
        owner = row.principal if row.pk == target.pk else target.principal
        authorize("cancel", principal=principal, turn_id=row.pk,
                  conversation_id=row.conversation_id, turn_principal=owner,
                  cancelled_turn_id=target.pk, cascade=cascade)


def cancel_row(row: Turn, error: ErrorRecord, *, mark: bool, callback_allowed: bool | None,
               ) -> None:
    """Cancel one active turn. Caller holds the tree lock (and asked the policy about the
    turn's completion callback before taking it)."""
    record = error.for_turn()
    extra = {"options": {**(row.options or {}), "cancel_cascade": True}} if mark else {}
    closed = end(row, "cancel", reason="cancelled", repair_reason=REASON, error=record, **extra)
    record_event(row.root_turn_id, row.pk, row.conversation_id, "turn.cancelled",
                 {"status": TurnStatus.CANCELLED})
    completion_callback(row, callback_allowed)
    for call in closed:
        if call.interrupted:
            emit("tool_call.interrupted", turn_id=row.pk, conversation_id=row.conversation_id,
                 id=call.call_id, name=call.name, tool_execution_id=call.execution_id)
        if call.approval_cancelled:
            emit("approval.cancelled", turn_id=row.pk, conversation_id=row.conversation_id,
                 id=call.call_id, name=call.name, tool_execution_id=call.execution_id)
    emit("turn.cancelled", turn_id=row.pk, conversation_id=row.conversation_id,
         started_at=row.started_at, status=TurnStatus.CANCELLED, error=record)


def _after(rows: list[Turn]) -> None:
    """Wake the conversations the cancelled turns leave and ring their lanes' next turns."""
    seen: set[str] = set()
    for row in rows:
        if row.conversation_id in seen:
            continue
        seen.add(row.conversation_id)
        with transaction.atomic():
            hand_on(row.conversation_id)
    callbacks = list(Delivery.objects.pending().filter(
        key__in=[f"{COMPLETION_PREFIX}{row.pk}" for row in rows]).values_list("pk", flat=True))

    def deliver_callbacks() -> None:
        for delivery_id in callbacks:
            try:
                deliver(delivery_id)
            except Exception:
                logger.warning("could not deliver callback %r; maintenance will retry",
                               delivery_id, exc_info=True)

    if callbacks:
        transaction.on_commit(deliver_callbacks)


@dataclass
class _Plan:
    """What a cancel changes, read with or without the tree lock: whole rows only for the
    turns it will change; ``left`` counts the active descendants left to the sweep."""

    target: Turn
    unreachable: list[Turn]
    reachable: list[Turn]
    left: int = 0

    @property
    def active(self) -> bool:
        return self.target.status in ACTIVE_TURN_STATUSES

    @property
    def rows(self) -> list[Turn]:
        return [self.target, *self.unreachable, *self.reachable]


def _plan(turn_id: str, cascade: bool, batch: int) -> _Plan:
    target = Turn.objects.get(pk=turn_id)
    if not cascade:
        # The inline sub-agents it is parked on are part of its step: they end with it.
        return _Plan(target, controls.inline_chain(target), [])
    active = target.status in ACTIVE_TURN_STATUSES
    # Marked for the sweep: an active target (cancelled now, with the mark) or one an earlier
    # cancel left cancelled (escalated below); a finished one is not.
    marked = active or target.status == TurnStatus.CANCELLED
    unreachable, reachable = _descendants(target, marked=marked)
    # A running descendant is never claimed again, so refusing claims does not stop it: only
    # its fence moving does. It is cancelled now, past the batch if need be (there are at
    # most as many as the tree has executions in flight); the sweep takes the rest.
    running = [node for node in reachable if node.status == TurnStatus.RUNNING]
    rest = [node for node in reachable if node.status != TurnStatus.RUNNING]
    room = max(batch - len(unreachable) - len(running) - (1 if active else 0), 0)
    chosen = running + rest[:room]
    rows = Turn.objects.in_bulk([node.pk for node in unreachable + chosen])
    return _Plan(target, [rows[node.pk] for node in unreachable if node.pk in rows],
                 [rows[node.pk] for node in chosen if node.pk in rows],
                 left=len(reachable) - len(chosen))


#: How often a cancel reads its plan again when turns appeared after it asked the policy.
ATTEMPTS = 3


def cancel(turn: Turn | str, *, cascade: bool = False, principal: Any = None) -> CancelReport:
    """Cancel a turn (and with ``cascade`` its descendants) for ``principal``.

    The policy is asked for the target (even for a no-op) and every turn that changes, and about
    their completion callbacks, BEFORE the tree lock is taken; under the lock the plan is read
    again, and when a turn appeared meanwhile (a child launched by a racing worker) the call
    asks about it and tries again. Past the last attempt a newcomer is left to the sweep.
    Descendants past the batch are neither loaded nor asked about: the sweep cancels them as
    part of the cascade this call was authorized for.
    """
    flag(cascade, "cancel(): cascade=")
    turn_id = turn.pk if isinstance(turn, Turn) else turn
    batch = max(int(turnkit_settings.MAINTENANCE_BATCH_SIZE), 1)
    # An id no database stores (a NUL, a lone surrogate) names no turn; asked, PostgreSQL and
    # SQLite's driver refuse the query itself.
    root_id = None if isinstance(turn_id, str) and unstorable(turn_id) else (
        Turn.objects.filter(pk=turn_id).values_list("root_turn_id", flat=True).first())
    if root_id is None:
        raise Turn.DoesNotExist(f"turn {turn_id!r} does not exist")
    report = CancelReport(turn_id, cascade)
    asked: dict[str, bool | None] = {}  # turn id: its callback decision
    for attempt in range(1, ATTEMPTS + 1):
        seen = _plan(turn_id, cascade, batch)
        fresh = [row for row in seen.rows if row.pk not in asked]
        _authorize(fresh, principal, seen.target, cascade)
        asked.update((row.pk, callback_decision(row)) for row in fresh)
        with transaction.atomic():
            lock_tree(root_id)
            plan = _plan(turn_id, cascade, batch)
            if any(row.pk not in asked for row in plan.rows) and attempt < ATTEMPTS:
                continue  # ask about the newcomers without the lock, then read again
            changed = _execute(plan, report, principal, cascade, asked)
        if changed is None:
            return report
        report.cancelled = [row.pk for row in changed]
        return report
    return report  # pragma: no cover - the last attempt always returns


def _execute(plan: _Plan, report: CancelReport, principal: Any, cascade: bool,
             asked: dict[str, bool | None]) -> list[Turn] | None:
    """Apply a plan under the tree lock; None when it changes nothing."""
    target, active = plan.target, plan.active
    report.status = target.status
    unreachable = [row for row in plan.unreachable if row.pk in asked]
    reachable = [row for row in plan.reachable if row.pk in asked]
    report.remaining = plan.left + len(plan.reachable) - len(reachable)
    if not active and not plan.unreachable and not plan.reachable and not plan.left:
        return None
    changed: list[Turn] = []
    if active:
        cancel_row(target, _error(principal, target.pk, cascade=cascade, ancestor=False),
                   mark=cascade, callback_allowed=asked.get(target.pk))
        report.status = TurnStatus.CANCELLED  # a finished target keeps the status it ended in
        changed.append(target)
    elif target.status == TurnStatus.CANCELLED and not (target.options or {}).get(
            "cancel_cascade"):
        # Escalation of an earlier plain cancel: mark it so the sweep finds the rest.
        set_options(target, cancel_cascade=True)
    for row in unreachable + reachable:
        cancel_row(row, _error(principal, target.pk, cascade=True, ancestor=True), mark=True,
                   callback_allowed=asked.get(row.pk))
        changed.append(row)
    _after(changed)
    return changed


def cancel_sweep() -> list[str]:
    """Cancel active turns under cascade-cancelled parents; at most one batch per call.

    Reads only active turns (joined to their parent), oldest first; a turn it cancels is marked
    too, so its own children qualify on the next round of the same call.
    """
    batch = max(int(turnkit_settings.MAINTENANCE_BATCH_SIZE), 1)
    done: list[str] = []
    while len(done) < batch:
        found = list(
            Turn.objects.under_cascade()
            .order_by("created_at", "id").values_list("root_turn_id", "pk")[:batch - len(done)]
        )
        before = len(done)
        for root_id, group in groupby(sorted(found), key=lambda pair: pair[0]):
            done.extend(_sweep_tree(root_id, [pk for _, pk in group]))
        if len(done) == before:
            break
    return done


def _sweep_tree(root_id: str, turn_ids: list[str]) -> list[str]:
    changed: list[Turn] = []
    # The policy is asked about the callbacks before the tree lock is taken.
    callbacks = {row.pk: callback_decision(row) for row in Turn.objects.filter(pk__in=turn_ids)}
    with transaction.atomic():
        lock_tree(root_id)
        rows = Turn.objects.filter(pk__in=turn_ids).active().select_related(
            "parent_turn", "root_turn").order_by("created_at", "id")
        for row in rows:
            parent = row.parent_turn or row.root_turn  # a root-level task hangs off its root
            if parent.pk == row.pk or parent.status != TurnStatus.CANCELLED or not (
                    parent.options or {}).get("cancel_cascade"):
                continue
            cause = parent.error or {}
            error = _error(cause.get("by"), str(cause.get("cancelled_turn") or parent.pk),
                           cascade=True, ancestor=True)
            cancel_row(row, error, mark=True, callback_allowed=callbacks.get(row.pk))
            changed.append(row)
        _after(changed)
    return [row.pk for row in changed]


__all__ = ["CancelReport", "cancel", "cancel_row", "cancel_sweep"]
