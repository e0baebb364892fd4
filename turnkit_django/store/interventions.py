"""Pause, resume and steer a set of turns of one tree, and decide a parked call: each one
transaction under the tree lock.

The caller (``services.controls``) selects the turns and asks the policy for each of them first;
these functions lock the tree, read the turns again, check and change them (through
:mod:`.controls`) and say what changed, so the caller emits events and rings doorbells after.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction

from ..base.ids import new_id
from ..base.serialization import JsonObject, JsonValue, json_safe
from ..base.states import TERMINAL_TURN_STATUSES, TurnStatus
from ..exceptions import ApprovalError, InvalidTransition, KeyConflict
from ..models import ToolExecution, Turn
from . import controls
from .events import stamp
from .locks import lock_tree


@dataclass(frozen=True)
class Resumed:
    """The turns a resume resumed, and those of them its caller dispatches (background turns
    back to pending)."""

    resumed: list[Turn]
    dispatch: list[str]


@dataclass(frozen=True)
class Steered:
    """The target's steering receipt and every turn given the guidance."""

    receipt: JsonObject | None
    steered: list[Turn]


def _locked(rows: list[Turn]) -> list[Turn]:
    """``rows`` read again (the caller holds their tree lock)."""
    found = {r.pk: r for r in Turn.objects.filter(pk__in=[r.pk for r in rows])}
    return [found[r.pk] for r in rows if r.pk in found]


def awaiting_approval(turn_ids: list[str]) -> set[str]:
    """The turns among ``turn_ids`` with a call waiting for approval."""
    return set(ToolExecution.objects.awaiting_approval().filter(turn_id__in=turn_ids)
               .values_list("turn_id", flat=True))


def pause(target: Turn, rows: list[Turn]) -> list[Turn]:
    """Pause ``rows`` (of ``target``'s tree; see :func:`.controls.request_pause`); return the
    turns it changed."""
    changed: list[Turn] = []
    with transaction.atomic():
        now = lock_tree(target.root_turn_id).now
        for row in _locked(rows):
            if controls.request_pause(row, now):
                changed.append(row)
    return changed


def resume(target: Turn, rows: list[Turn], chain: list[Turn]) -> Resumed:
    """Resume ``rows`` (of ``target``'s tree, ``chain`` the inline sub-agents it is parked on)
    and move the tree's deadline by the longest pause; a step waiting for an approval only has
    an operator's hold lifted (InvalidTransition when there is none)."""
    resumed: list[Turn] = []
    ring: list[str] = []
    with transaction.atomic():
        now = lock_tree(target.root_turn_id).now
        rows = _locked(rows)
        # Under the lock: a worker parking a call for approval holds it, so a turn cannot
        # park between this check and the resumption below.
        awaiting = awaiting_approval([r.pk for r in rows])
        # The target's step waits for a person when its call, or a call of an inline child it
        # is parked on, waits for a decision: then only an operator's hold is lifted.
        step = {target.pk, *(c.pk for c in chain)}
        waits = bool(awaiting & step)
        if waits and not any(r.pk == target.pk and (r.controls or {}).get("pause_held")
                             for r in rows):
            raise InvalidTransition(target.pk, "waiting for an approval", "resume")
        longest = timedelta(0)
        for row in rows:
            if row.pk in awaiting or (waits and row.pk in step):
                controls.lift_hold(row)
                continue
            paused = controls.resume(row, now)
            if paused is None:
                continue
            longest = max(longest, paused)
            resumed.append(row)
            if row.submitted_at is not None and row.status == TurnStatus.PENDING:
                ring.append(row.pk)
        controls.extend_deadline(target.root_turn_id, longest)
    return Resumed(resumed, ring)


def steer(target: Turn, rows: list[Turn], *, key: str, text: str,
          principal: JsonValue) -> Steered:
    """Give ``rows`` (of ``target``'s tree) the steering ``text`` under ``key``, once per turn
    (an exact retry finds its receipt; the same key with other text or principal raises
    KeyConflict); a finished target raises InvalidTransition, finished descendants are left."""
    receipt: JsonObject | None = None
    steered: list[Turn] = []
    with transaction.atomic():
        now = lock_tree(target.root_turn_id).now
        for row in _locked(rows):
            found = _receipt(row, key, text, principal)
            if found is None and row.status in TERMINAL_TURN_STATUSES:
                if row.pk == target.pk:
                    raise InvalidTransition(row.pk, row.status, "steer")
                continue
            if found is None:
                found = {"id": new_id("steer"), "key": key, "turn_id": row.pk, "text": text,
                         "principal": principal, "at": stamp(now), "message_id": None}
                controls.add_steering(row, found)
            steered.append(row)
            if row.pk == target.pk:
                receipt = found
    return Steered(receipt, steered)


def _receipt(row: Turn, key: str, text: str, principal: object) -> JsonObject | None:
    for receipt in (row.controls or {}).get("steers") or ():
        if receipt.get("key") == key:
            if receipt.get("text") != text or receipt.get("principal") != principal:
                raise KeyConflict(key, "steering")
            return dict(receipt)
    return None


@dataclass(frozen=True)
class AlreadyDecided:
    """The call was decided this way already: nothing changed."""

    execution: ToolExecution


@dataclass(frozen=True)
class Decided:
    """A decision recorded on ``execution`` (of ``turn``): ``resumed`` whether its turn (and
    the inline parents parked on it, ``top_id`` the highest) resumed, ``dispatch`` whether its
    caller dispatches the (background) turn."""

    execution: ToolExecution
    turn: Turn
    resumed: bool
    dispatch: bool
    top_id: str


def decide_approval(execution: ToolExecution, state: str, *, principal: object, reason: str,
                    edited: JsonObject | None, system: bool) -> Decided | AlreadyDecided:
    """Record ``state`` (approved, denied, expired) on the parked call ``execution`` (with the
    ``edited`` arguments, validated by the caller) and resume its turn, unless an operator's
    pause holds it; ApprovalError when the call is not waiting for a decision (or its request
    expired, unless ``system``)."""
    with transaction.atomic():
        now = lock_tree(execution.turn.root_turn_id).now
        execution = ToolExecution.objects.select_related("turn").get(pk=execution.pk)
        row = execution.turn
        current = dict(execution.approval or {})
        if current.get("state") == "cancelled" or (
                current.get("state") == "requested" and row.status in TERMINAL_TURN_STATUSES):
            ended = "was cancelled" if row.status == TurnStatus.CANCELLED else "ended"
            raise ApprovalError(f"tool call {execution.tool_call_id!r} cannot be {state}: its "
                                f"turn {row.pk!r} {ended} before it ran; nothing will run")
        if current.get("state") == state and (edited is None or edited == execution.arguments):
            return AlreadyDecided(execution)  # decided this way already
        if current.get("state") != "requested" or row.status != TurnStatus.PAUSED:
            raise ApprovalError(f"tool call {execution.tool_call_id!r} is not waiting for an "
                                f"approval (it is {current.get('state') or execution.status})")
        if not system and current.get("expires_at") and current["expires_at"] < stamp(now):
            raise ApprovalError(f"the approval request of tool call {execution.tool_call_id!r} "
                                "expired; it is denied by maintenance")
        decided = {**current, "state": state, "decided_at": stamp(now),
                   "by": json_safe(principal)}
        if reason:
            decided["reason"] = reason
        if edited is not None:
            decided["proposed_arguments"] = execution.arguments
        controls.decide(execution, row, decided, edited)
        # An operator's pause holds the turn (None), or a parent parked on it: it runs after
        # resume(), not now. An inline child's chain is continued from the top.
        parents = controls.parked_parents(row)
        held = any((p.controls or {}).get("pause_held") for p in parents)
        paused = None if held else controls.resume(row, now, decision=True)
        top = row
        for parent in parents if paused is not None else ():
            longest = max(paused or timedelta(0), controls.resume(parent, now) or timedelta(0))
            paused, top = longest, parent
        if paused is not None:
            controls.extend_deadline(row.root_turn_id, paused)
        background = row.submitted_at is not None
    return Decided(execution, row, paused is not None, background and paused is not None,
                   top.pk)


__all__ = ["AlreadyDecided", "Decided", "Resumed", "Steered", "awaiting_approval",
           "decide_approval", "pause", "resume", "steer"]
