"""The application's control writes: pause and resume, steering receipts, approval decisions.

Every function here is called with the tree lock of the turn held (services.controls and
services.approvals take it), so each write is linearised with the turn's worker, whose next
fast-path step refuses once ``controls_pending`` is set (see runtime.controls).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db.models import F, Q
from django.db.models.functions import Now

from ..base.serialization import JsonMapping, JsonObject
from ..base.states import ACTIVE_TURN_STATUSES, TurnStatus
from ..models import ToolExecution, Turn
from .events import record_event, stamp
from .turns import apply_transition


def _event(row: Turn, type_: str, **payload: object) -> None:
    record_event(row.root_turn_id, row.pk, row.conversation_id, type_, payload)


def request_pause(row: Turn, now: datetime) -> bool:
    """Pause ``row``: at once when idle (pending, waiting), at its worker's next step boundary
    when running; a turn parked for approval is held (``pause_held``): the decision will not
    resume it (:func:`resume`). Return whether anything changed (a paused turn already held
    or not parked, or a finished turn: no)."""
    controls = dict(row.controls or {})
    if row.status == TurnStatus.PAUSED and not controls.get("pause_held") and (
            controls.get("inline_child")  # parked on its inline sub-agent: held the same way
            or ToolExecution.objects.awaiting_approval().filter(turn_id=row.pk).exists()):
        controls["pause_held"] = True
        Turn.objects.filter(pk=row.pk).update(controls=controls)
        row.controls = controls
        _event(row, "turn.paused", status=TurnStatus.PAUSED, awaiting_approval=True)
        return True
    if row.status in (TurnStatus.PENDING, TurnStatus.WAITING):
        controls.update(paused_at=stamp(now), paused_from=str(row.status))
        apply_transition(row.pk, "pause", updated_at=Now(), controls=controls)
        row.status, row.controls = TurnStatus.PAUSED, controls
        _event(row, "turn.paused", status=TurnStatus.PAUSED)
        return True
    if row.status == TurnStatus.RUNNING and not controls.get("pause_requested"):
        controls["pause_requested"] = True
        Turn.objects.filter(pk=row.pk).update(controls=controls, controls_pending=True)
        row.controls, row.controls_pending = controls, True
        _event(row, "turn.pause_requested")
        return True
    return False


def resume(row: Turn, now: datetime, *, decision: bool = False) -> timedelta | None:
    """Resume a paused ``row`` (or retract a pause its worker has not reached); return how
    long it was paused (None: it was not paused, or, for a ``decision`` on its parked call,
    an operator's pause holds it until :func:`resume` without ``decision``)."""
    controls = dict(row.controls or {})
    if decision and controls.get("pause_held"):
        return None
    controls.pop("pause_held", None)
    if row.status == TurnStatus.RUNNING and controls.pop("pause_requested", None):
        Turn.objects.filter(pk=row.pk).update(controls=controls)
        row.controls = controls
        _event(row, "turn.resumed", retracted=True)
        return None
    if row.status != TurnStatus.PAUSED:
        return None
    paused_at = controls.pop("paused_at", None)
    came_from = controls.pop("paused_from", None)
    controls.pop("inline_child", None)  # continued, it runs its child on (runtime.delegation)
    transition = "resume_waiting" if came_from == TurnStatus.WAITING else "resume"
    apply_transition(row.pk, transition, updated_at=Now(), controls=controls)
    row.status = TurnStatus.PENDING if transition == "resume" else TurnStatus.WAITING
    row.controls = controls
    _event(row, "turn.resumed", status=row.status)
    if paused_at is None:
        return timedelta(0)
    return max(now - datetime.fromisoformat(paused_at), timedelta(0))


#: How deep a chain of inline sub-agents is followed (far past any ``max_depth``).
_CHAIN_LIMIT = 100


def inline_chain(row: Turn) -> list[Turn]:
    """The inline sub-agents ``row`` is parked on, top down, each parked on the next: a
    paused parent whose delegation waits for its child (runtime.delegation)."""
    chain: list[Turn] = []
    current = row
    while len(chain) < _CHAIN_LIMIT and current.status == TurnStatus.PAUSED:
        child_id = (current.controls or {}).get("inline_child")
        child = None if not isinstance(child_id, str) else Turn.objects.filter(
            pk=child_id, parent_turn_id=current.pk, status__in=ACTIVE_TURN_STATUSES).first()
        if child is None:
            break
        chain.append(child)
        current = child
    return chain


def parked_parents(row: Turn) -> list[Turn]:
    """The inline parents parked on ``row``, bottom up (the inverse of :func:`inline_chain`)."""
    parents: list[Turn] = []
    current = row
    while len(parents) < _CHAIN_LIMIT and current.parent_turn_id is not None:
        parent = Turn.objects.filter(pk=current.parent_turn_id,
                                     status=TurnStatus.PAUSED).first()
        if parent is None or (parent.controls or {}).get("inline_child") != current.pk:
            break
        parents.append(parent)
        current = parent
    return parents


def lift_hold(row: Turn) -> bool:
    """Lift an operator's pause from ``row``, parked for approval: it stays ``paused`` and
    the decision resumes it. Return whether it was held."""
    controls = dict(row.controls or {})
    if not controls.pop("pause_held", None):
        return False
    Turn.objects.filter(pk=row.pk).update(controls=controls)
    row.controls = controls
    _event(row, "turn.resumed", status=TurnStatus.PAUSED, awaiting_approval=True)
    return True


def extend_deadline(root_id: str, by: timedelta) -> None:
    """Move the tree's deadline later by ``by`` (paused time does not count against it).

    Every active turn of the tree carries a copy of the root's deadline (taken when it was
    created): maintenance releases a waiting turn past it and the heartbeat gives up a call
    that outlives it, so the copies move with the root's. The root's own row moves even when
    it has finished: it holds the deadline its still-active descendants are checked against."""
    if by > timedelta(0):
        Turn.objects.filter(Q(pk=root_id) | Q(status__in=ACTIVE_TURN_STATUSES),
                            root_turn_id=root_id, deadline_at__isnull=False).update(
            deadline_at=F("deadline_at") + by)


def steering_receipts(controls: JsonMapping) -> list[JsonObject]:
    """The steering receipts recorded in a turn's ``controls`` (copies; malformed entries
    left out). One whose ``message_id`` is unset has not been read by the turn yet."""
    steers = controls.get("steers")
    return [dict(r) for r in steers if isinstance(r, dict)] if isinstance(steers, list) else []


def add_steering(row: Turn, receipt: JsonMapping) -> None:
    """Record a steering receipt for ``row``'s worker (it reads it at its next boundary)."""
    controls = dict(row.controls or {})
    controls["steers"] = [*(controls.get("steers") or ()), receipt]
    Turn.objects.filter(pk=row.pk).update(controls=controls, controls_pending=True)
    row.controls, row.controls_pending = controls, True
    _event(row, "turn.steer_requested", key=receipt["key"])


def decide(execution: ToolExecution, row: Turn, approval: JsonMapping,
           arguments: JsonObject | None = None) -> None:
    """Record a person's decision on a parked call (``arguments``: the approved, edited ones)."""
    fields: dict[str, object] = {"approval": approval, "updated_at": Now()}
    if arguments is not None:
        fields["arguments"] = arguments
    ToolExecution.objects.filter(pk=execution.pk).update(**fields)
    execution.approval = approval
    if arguments is not None:
        execution.arguments = arguments
    _event(row, f"approval.{approval['state']}", call_id=execution.tool_call_id,
           execution_id=execution.pk, tool=execution.tool_name,
           reason=approval.get("reason"))


__all__ = ["add_steering", "decide", "extend_deadline", "inline_chain", "lift_hold",
           "parked_parents", "request_pause", "resume",
           "steering_receipts"]
