"""The runtime's named reads: each one query, as the runtime made it, returned as plain values
or rows (the runtime imports neither ``django.db`` nor the models, issue 36)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from datetime import datetime
from typing import Any

from ..models import Conversation, Message, ToolExecution, Turn


def turn_deadline(turn_id: str) -> datetime | None:
    """Read the turn's ``deadline_at`` as committed now (None: no deadline, or no turn)."""
    return Turn.objects.filter(pk=turn_id).values_list("deadline_at", flat=True).first()


def executions_by_call(turn_id: str) -> dict[str, ToolExecution]:
    """Read the turn's tool executions, keyed by their tool call id."""
    return {e.tool_call_id: e for e in ToolExecution.objects.filter(turn_id=turn_id)}


def running_among(turn_id: str, execution_ids: Collection[str]) -> list[str]:
    """Read which of the turn's tool executions ``execution_ids`` are ``running``."""
    return list(ToolExecution.objects.filter(pk__in=execution_ids, turn_id=turn_id).running()
                .values_list("pk", flat=True))


def child_ids(execution_ids: Sequence[str]) -> list[str]:
    """Read the ids of the child turns the tool executions ``execution_ids`` launched."""
    return list(Turn.objects.filter(parent_tool_execution_id__in=execution_ids)
                .values_list("pk", flat=True))


def children_by_execution(execution_ids: Sequence[str]) -> dict[str | None, Turn]:
    """Read the child turns the tool executions ``execution_ids`` launched, keyed by the
    execution."""
    return {child.parent_tool_execution_id: child
            for child in Turn.objects.filter(parent_tool_execution_id__in=execution_ids)}


def any_active(turn_ids: Sequence[str]) -> bool:
    """Read whether any of the turns ``turn_ids`` is still active (not finished)."""
    return Turn.objects.filter(pk__in=list(turn_ids)).active().exists()


def message_by_id(message_id: str) -> Message:
    """Read the message ``message_id`` (Message.DoesNotExist when there is none)."""
    return Message.objects.get(pk=message_id)


def child_turn(execution_id: str) -> Turn | None:
    """Read the child turn the tool execution ``execution_id`` launched, if it did."""
    return Turn.objects.filter(parent_tool_execution_id=execution_id).first()


def turn_controls(turn_id: str) -> dict[str, Any]:
    """Read the turn's ``controls`` as committed now (a copy; Turn.DoesNotExist if none)."""
    return dict(Turn.objects.filter(pk=turn_id).values_list("controls", flat=True).get() or {})


def agent_and_parent(turn_id: str) -> tuple[str, str | None]:
    """Read the turn's ``agent_name`` and ``parent_turn_id`` (Turn.DoesNotExist if none)."""
    name, parent_id = Turn.objects.filter(pk=turn_id).values_list(
        "agent_name", "parent_turn_id").get()
    return name, parent_id


def turn_principals(turn_ids: Sequence[str]) -> dict[str, Any]:
    """Read the principal of each of the turns ``turn_ids`` that exists, keyed by turn id."""
    return dict(Turn.objects.filter(pk__in=turn_ids).values_list("pk", "principal"))


def turn_by_id(turn_id: str) -> Turn:
    """Read the turn ``turn_id`` (Turn.DoesNotExist when there is none)."""
    return Turn.objects.get(pk=turn_id)


def conversation_principal(conversation_id: str) -> Any:
    """Read the principal of the conversation ``conversation_id`` (None when there is none)."""
    return (Conversation.objects.filter(pk=conversation_id)
            .values_list("principal", flat=True).first())


def turns_by_id(turn_ids: Sequence[str]) -> dict[str, Turn]:
    """Read the turns ``turn_ids`` that exist, keyed by id."""
    return Turn.objects.in_bulk(turn_ids)


def conversation_by_id(conversation_id: str) -> Conversation | None:
    """Read the conversation ``conversation_id``, or None when there is none."""
    return Conversation.objects.filter(pk=conversation_id).first()


def turn_with_conversation(turn_id: str) -> Turn:
    """Read the turn ``turn_id`` with its conversation (Turn.DoesNotExist if none)."""
    return Turn.objects.select_related("conversation").get(pk=turn_id)


_CONVERSATION = Turn._meta.get_field("conversation")


def loaded_last_sequence(turn: Turn) -> int | None:
    """The ``last_sequence`` of the turn's conversation when the row was read with it (a
    claim's read); None otherwise, without a query."""
    return turn.conversation.last_sequence if _CONVERSATION.is_cached(turn) else None


__all__ = ["agent_and_parent", "any_active", "child_ids", "child_turn",
           "children_by_execution", "conversation_by_id", "conversation_principal",
           "executions_by_call", "loaded_last_sequence", "message_by_id", "running_among",
           "turn_by_id", "turn_controls", "turn_deadline", "turn_principals",
           "turn_with_conversation", "turns_by_id"]
