"""Cancelling turns: each cancel, and each sweep of a tree, one transaction under the tree lock.

:func:`cancel_plan` reads what a cancel changes (with or without the lock); :func:`cancel_tree`
locks the tree, reads the plan again and, unless turns appeared that the policy was not asked
about (:class:`Newcomers`), cancels them (:class:`Cancelled`); :func:`sweep_tree` cancels
turns under cascade-cancelled parents. What a higher layer does inside the transaction is passed
in: a turn's completion callback (``finish``), its lane's hand-on (``hand_on``, each in a
savepoint of its own), and the delivery of the callbacks after the commit (``deliver``).
The caller (``services.cancellation``) asks the policy before and reports after.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from functools import partial
from typing import Any

from django.db import transaction
from django.db.models import Q

from ..base.error_records import ErrorRecord
from ..base.serialization import json_safe
from ..base.states import ACTIVE_TURN_STATUSES, TurnStatus
from ..events import emit
from ..models import Delivery, Turn
from . import controls
from .deliveries import COMPLETION_PREFIX
from .events import record_event
from .locks import lock_tree
from .turns import end, set_options

REASON = "the turn was cancelled"

#: A turn's completion callback, in the cancel's transaction (with the policy's decision).
Finish = Callable[[Turn, "bool | None"], object]
#: A conversation's hand-on, in the cancel's transaction.
HandOn = Callable[[str], object]
#: The delivery of completion callbacks (their ids), after the commit.
Deliver = Callable[[list[str]], None]


def cancel_error(principal: Any, target_id: str, *, cascade: bool,
                 ancestor: bool) -> ErrorRecord:
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


@dataclass
class CancelPlan:
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


def cancel_plan(turn_id: str, cascade: bool, batch: int) -> CancelPlan:
    """Read what cancelling ``turn_id`` (with ``cascade``, at most ``batch`` turns) changes."""
    target = Turn.objects.get(pk=turn_id)
    if not cascade:
        # The inline sub-agents it is parked on are part of its step: they end with it.
        return CancelPlan(target, controls.inline_chain(target), [])
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
    return CancelPlan(target, [rows[node.pk] for node in unreachable if node.pk in rows],
                      [rows[node.pk] for node in chosen if node.pk in rows],
                      left=len(reachable) - len(chosen))


@dataclass(frozen=True)
class Newcomers:
    """Turns appeared under the lock that the policy was not asked about: nothing changed."""

    plan: CancelPlan


@dataclass(frozen=True)
class Cancelled:
    """What a cancel did: the target's status after it, the turns it cancelled (none: a no-op)
    and the active descendants left for the sweep."""

    status: str
    changed: list[Turn]
    remaining: int


def cancel_row(row: Turn, error: ErrorRecord, *, mark: bool, callback_allowed: bool | None,
               finish: Finish) -> None:
    """Cancel one active turn. Caller holds the tree lock (and asked the policy about the
    turn's completion callback, ``finish``'s decision, before taking it)."""
    record = error.for_turn()
    extra = {"options": {**(row.options or {}), "cancel_cascade": True}} if mark else {}
    closed = end(row, "cancel", reason="cancelled", repair_reason=REASON, error=record, **extra)
    record_event(row.root_turn_id, row.pk, row.conversation_id, "turn.cancelled",
                 {"status": TurnStatus.CANCELLED})
    finish(row, callback_allowed)
    for call in closed:
        if call.interrupted:
            emit("tool_call.interrupted", turn_id=row.pk, conversation_id=row.conversation_id,
                 id=call.call_id, name=call.name, tool_execution_id=call.execution_id)
        if call.approval_cancelled:
            emit("approval.cancelled", turn_id=row.pk, conversation_id=row.conversation_id,
                 id=call.call_id, name=call.name, tool_execution_id=call.execution_id)
    emit("turn.cancelled", turn_id=row.pk, conversation_id=row.conversation_id,
         started_at=row.started_at, status=TurnStatus.CANCELLED, error=record)


def _after(rows: list[Turn], hand_on: HandOn, deliver: Deliver) -> None:
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
    if callbacks:
        transaction.on_commit(partial(deliver, callbacks))


def cancel_tree(root_id: str, turn_id: str, *, cascade: bool, batch: int, principal: Any,
                asked: Mapping[str, bool | None], last: bool, finish: Finish,
                hand_on: HandOn, deliver: Deliver) -> Cancelled | Newcomers:
    """Cancel ``turn_id`` (of the tree ``root_id``; with ``cascade`` its descendants) for
    ``principal``, the turns the policy was asked about being the keys of ``asked`` (each
    with its callback decision). A turn that appeared since is :class:`Newcomers`, unless
    ``last``: then it is left to the sweep."""
    with transaction.atomic():
        lock_tree(root_id)
        plan = cancel_plan(turn_id, cascade, batch)
        if any(row.pk not in asked for row in plan.rows) and not last:
            return Newcomers(plan)  # asked about without the lock, then read again
        return _execute(plan, principal, cascade, asked, finish, hand_on, deliver)


def _execute(plan: CancelPlan, principal: Any, cascade: bool, asked: Mapping[str, bool | None],
             finish: Finish, hand_on: HandOn, deliver: Deliver) -> Cancelled:
    """Apply a plan under the tree lock."""
    target, active = plan.target, plan.active
    status = target.status
    unreachable = [row for row in plan.unreachable if row.pk in asked]
    reachable = [row for row in plan.reachable if row.pk in asked]
    remaining = plan.left + len(plan.reachable) - len(reachable)
    if not active and not plan.unreachable and not plan.reachable and not plan.left:
        return Cancelled(status, [], remaining)
    changed: list[Turn] = []
    if active:
        cancel_row(target, cancel_error(principal, target.pk, cascade=cascade, ancestor=False),
                   mark=cascade, callback_allowed=asked.get(target.pk), finish=finish)
        status = TurnStatus.CANCELLED  # a finished target keeps the status it ended in
        changed.append(target)
    elif target.status == TurnStatus.CANCELLED and not (target.options or {}).get(
            "cancel_cascade"):
        # Escalation of an earlier plain cancel: mark it so the sweep finds the rest.
        set_options(target, cancel_cascade=True)
    for row in unreachable + reachable:
        cancel_row(row, cancel_error(principal, target.pk, cascade=True, ancestor=True),
                   mark=True, callback_allowed=asked.get(row.pk), finish=finish)
        changed.append(row)
    _after(changed, hand_on, deliver)
    return Cancelled(status, changed, remaining)


def sweep_tree(root_id: str, turn_ids: list[str], *, callbacks: Mapping[str, bool | None],
               finish: Finish, hand_on: HandOn, deliver: Deliver) -> list[Turn]:
    """Cancel the active turns among ``turn_ids`` (of the tree ``root_id``) whose parent (a
    root-level task's root) a cascade cancelled, ``callbacks`` holding the policy's decisions
    on their completion callbacks; return the turns cancelled."""
    changed: list[Turn] = []
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
            error = cancel_error(cause.get("by"), str(cause.get("cancelled_turn") or parent.pk),
                                 cascade=True, ancestor=True)
            cancel_row(row, error, mark=True, callback_allowed=callbacks.get(row.pk),
                       finish=finish)
            changed.append(row)
        _after(changed, hand_on, deliver)
    return changed


__all__ = ["REASON", "CancelPlan", "Cancelled", "Newcomers", "cancel_error", "cancel_plan",
           "cancel_row", "cancel_tree", "sweep_tree"]
