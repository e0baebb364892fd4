"""Transcript repair: give every open tool call exactly one result (P11).

Used when a turn stops without finishing its tool batch: failure, cancel, stale, dead-letter.
The caller holds the tree lock inside a transaction.
"""

from __future__ import annotations

from typing import Any

from django.db.models.functions import Now

from .messages import ToolResultPart, load_parts
from .models import Message, ToolExecution, Turn
from .states import ToolStatus
from .store import NewMessage, insert_messages

OUTCOME_UNKNOWN = (
    "The tool was interrupted before its result was recorded, so its outcome is unknown: it may "
    "or may not have taken effect. Check its effect before calling it again."
)


def unknown_result() -> dict[str, Any]:
    return {"error": "outcome_unknown", "message": OUTCOME_UNKNOWN}


def not_executed(reason: str) -> dict[str, Any]:
    return {"error": "not_executed", "message": f"Not executed: {reason}."}


def open_tool_calls(turn_id: str) -> list[tuple[str, str, dict[str, Any]]]:
    """Return (call id, tool name, arguments) of calls in the turn without a result message."""
    calls: list[tuple[str, str, dict[str, Any]]] = []
    answered: set[str] = set()
    for stored in Message.objects.filter(turn_id=turn_id).values_list("content", flat=True):
        for part in load_parts(stored):
            if part.kind == "tool_call":
                calls.append((part.id, part.name, part.arguments))
            elif part.kind == "tool_result":
                answered.add(part.tool_call_id)
    return [c for c in calls if c[0] not in answered]


def repair(turn: Turn, *, reason: str, fence: int | None = None) -> int:
    """Close the turn's open tool calls; running executions become ``interrupted``.

    Returns the number of results appended.
    """
    pending = open_tool_calls(turn.pk)
    if not pending:
        return 0
    executions = {
        e.tool_call_id: e
        for e in ToolExecution.objects.filter(turn_id=turn.pk,
                                              tool_call_id__in=[c[0] for c in pending])
    }
    messages = []
    content: Any
    for call_id, name, arguments in pending:
        execution = executions.get(call_id)
        if execution is None:
            execution = ToolExecution.objects.create(
                turn_id=turn.pk, tool_call_id=call_id, tool_name=name, arguments=arguments,
                status=ToolStatus.CANCELLED, result=not_executed(reason), fence=fence,
                completed_at=Now(),
            )
            content, interrupted = not_executed(reason), False
        elif execution.status == ToolStatus.RUNNING or (
            execution.status == ToolStatus.PENDING and execution.attempts > 0
        ):
            # A replay-safe call reset to pending by recovery may already have taken effect.
            ToolExecution.objects.filter(pk=execution.pk, status=execution.status).update(
                status=ToolStatus.INTERRUPTED, error=unknown_result(), completed_at=Now(),
                updated_at=Now(),
            )
            content, interrupted = unknown_result(), True
        elif execution.status == ToolStatus.PENDING:
            ToolExecution.objects.filter(pk=execution.pk, status=ToolStatus.PENDING).update(
                status=ToolStatus.CANCELLED, result=not_executed(reason), completed_at=Now(),
                updated_at=Now(),
            )
            content, interrupted = not_executed(reason), False
        else:
            # Finished but its message is missing cannot happen (both commit together); be safe.
            content = execution.result if execution.status == ToolStatus.COMPLETED else (
                execution.error or not_executed(reason))
            interrupted = execution.status == ToolStatus.INTERRUPTED
        messages.append(
            NewMessage(
                "tool",
                [ToolResultPart(call_id, name, content, is_error=True)],
                kind="tool_result",
                turn_id=turn.pk,
                tool_execution_id=execution.pk,
                metadata={"repair": reason, "interrupted": interrupted},
                fence=fence,
            )
        )
    insert_messages(turn.conversation_id, messages)
    return len(messages)
