"""Pause, resume and steer a set of turns of one tree: each one transaction under the tree lock.

The caller (``services.controls``) selects the turns and asks the policy for each of them first;
these functions lock the tree, read the turns again, check and change them (through
:mod:`.controls`) and say what changed, so the caller emits events and rings doorbells after.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.db import transaction

from ..exceptions import InvalidTransition, KeyConflict
from ..ids import new_id
from ..models import ToolExecution, Turn
from ..serialization import JsonObject, JsonValue
from ..states import TERMINAL_TURN_STATUSES, TurnStatus
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


__all__ = ["Resumed", "Steered", "awaiting_approval", "pause", "resume", "steer"]
