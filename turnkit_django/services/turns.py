"""Turns as use cases: create, submit, and run a submitted turn (what the Celery task does)."""

from __future__ import annotations

from ..models import Turn
from ..runtime import execute
from ..runtime.creation import new_conversation, new_turn
from ..runtime.deliveries import wake_after
from ..runtime.submission import dispatch, submit
from .recovery import drain


def run_turn(turn_id: str, *, kind: str = "celery") -> bool:
    """Execute a submitted turn if it is claimable, then hand its lane on and run maintenance."""
    ran = execute(turn_id, kind=kind)
    if ran:
        dispatch_next_in_lane(turn_id)
        wake_after(turn_id)  # buffered deliveries get their continuation
    drain()
    return ran


def dispatch_next_in_lane(turn_id: str) -> None:
    """Ring for the oldest pending submitted turn of the conversation that ``turn_id`` left."""
    conversation_id = Turn.objects.filter(pk=turn_id).values_list(
        "conversation_id", flat=True).first()
    following = (Turn.objects.filter(conversation_id=conversation_id).queued_in_lane()
                 .values_list("pk", flat=True).first())
    if following is not None:
        dispatch(following)


__all__ = ["dispatch", "dispatch_next_in_lane", "new_conversation", "new_turn", "run_turn",
           "submit"]
