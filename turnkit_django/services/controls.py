"""Pause, resume and steer a turn (and, on request, its descendants), as use cases.

Each control asks the policy for EVERY turn it will change before any change (``pause``,
``resume``, ``steer``); one denial raises AuthorizationError and writes nothing. The changes are
made under the tree lock (store.controls); a running turn's worker handles them at its next
step boundary (runtime.controls).

Deadlines: paused time does not count. Resuming moves the tree's deadline later by the time the
turn was paused (the longest pause among the turns a call resumes), so a turn that waited a day
for a person is not failed for its ``TIMEOUT`` the moment it resumes.
"""

from __future__ import annotations

from typing import Any

from ..base.serialization import JsonObject, json_value
from ..base.states import ACTIVE_TURN_STATUSES, TurnStatus
from ..conf import turnkit_settings
from ..events import emit
from ..exceptions import InvalidTransition
from ..models import Turn
from ..runtime.authorization import authorize
from ..runtime.submission import dispatch
from ..store import controls, interventions
from ..store.input_checks import flag, idempotency_key, require_text


def selected(target: Turn, *, cascade: bool) -> list[Turn]:
    """``target`` and, with ``cascade``, its active descendants (parents first; at most
    ``MAINTENANCE_BATCH_SIZE`` of them)."""
    rows = [target]
    if not flag(cascade, "cascade= (descendants= of steer)"):
        return rows
    limit = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    frontier = [target.pk]
    while frontier and len(rows) <= limit:
        children = list(Turn.objects.filter(parent_turn_id__in=frontier).order_by(
            "created_at", "id")[:limit])
        frontier = [c.pk for c in children]
        rows += [c for c in children if c.status in ACTIVE_TURN_STATUSES]
    return rows[:limit + 1]


def _authorize(action: str, rows: list[Turn], principal: Any, **resources: Any) -> None:
    for row in rows:
        authorize(action, principal=principal, turn_id=row.pk,
                  conversation_id=row.conversation_id, turn_principal=row.principal,
                  **resources)


def pause(target: Turn, *, principal: Any = None, cascade: bool = False) -> list[str]:
    """Pause ``target`` (and its descendants): idle turns at once, running ones at their
    worker's next step boundary; return the ids it changed. Pausing twice is a no-op."""
    rows = selected(target, cascade=cascade)
    _authorize("pause", rows, principal, cascade=cascade)
    changed = interventions.pause(target, rows)
    for row in changed:  # each turn's own conversation: a sub-agent has one of its own
        if row.status == TurnStatus.PAUSED:  # paused at once (idle) or held (parked)
            emit("turn.paused", turn_id=row.pk, conversation_id=row.conversation_id,
                 status=TurnStatus.PAUSED)
        else:
            emit("turn.pause_requested", turn_id=row.pk, conversation_id=row.conversation_id)
    return [row.pk for row in changed]


def resume(target: Turn, *, principal: Any = None, cascade: bool = False) -> list[str]:
    """Resume paused turns (or retract a pause not yet reached); return the ids resumed.

    A background turn is dispatched; an inline one is left ``pending`` for the caller to
    execute. A turn whose tool call waits for approval resumes only by a decision
    (``approve``/``deny``): resuming it raises InvalidTransition, unless an operator paused it
    while it waited, whose pause this lifts (it then waits for the decision, which resumes it).
    Resuming a turn that is not paused is a no-op.
    """
    rows = selected(target, cascade=cascade)
    # The inline sub-agents a turn is parked on are part of its step: they continue with it.
    chain = controls.inline_chain(target)
    rows += [c for c in chain if c.pk not in {r.pk for r in rows}]
    _authorize("resume", rows, principal, cascade=cascade)
    outcome = interventions.resume(target, rows, chain)
    for turn_id in outcome.dispatch:
        dispatch(turn_id)
    for row in outcome.resumed:
        emit("turn.resumed", turn_id=row.pk, conversation_id=row.conversation_id)
    return [row.pk for row in outcome.resumed]


def steer(target: Turn, text: str, *, key: str, principal: Any = None,
          descendants: bool = False) -> JsonObject:
    """Give the current turn durable guidance before its next model request; idempotent by
    ``key`` (unique per turn). Return the target's receipt.

    Tool calls the turn proposed before the guidance and has not started are skipped with a
    "superseded" result. An exact retry returns the same receipt; the same key with other text
    or another principal raises KeyConflict. A finished turn cannot be steered
    (InvalidTransition), except by an exact retry.
    """
    require_text(text, "steering text")
    idempotency_key(key, "steering")
    principal = json_value(principal, "principal")
    rows = selected(target, cascade=descendants)
    _authorize("steer", rows, principal, descendants=descendants)
    outcome = interventions.steer(target, rows, key=key, text=text, principal=principal)
    receipt, steered = outcome.receipt, outcome.steered
    if receipt is None:  # pragma: no cover - the target is always selected
        raise InvalidTransition(target.pk, target.status, "steer")
    for row in steered:  # every turn given the guidance, each with its own conversation
        emit("turn.steer_requested", turn_id=row.pk, conversation_id=row.conversation_id,
             key=key)
    return receipt


__all__ = ["pause", "resume", "selected", "steer"]
