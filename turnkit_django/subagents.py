"""Sub-agent delegation: a child turn in a fresh child conversation, sharing the root's budget."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from . import budget
from .authorization import is_allowed
from .exceptions import BudgetExceeded
from .messages import TextPart
from .models import ToolExecution, Turn
from .states import ToolStatus, TurnStatus

if TYPE_CHECKING:
    from .agents import Agent
    from .messages import ToolCallPart
    from .runtime import Execution
    from .tools.base import Tool


def envelope(child: Turn) -> dict[str, Any]:
    """The compact result a parent receives for a child turn."""
    return {
        "agent": child.agent_name,
        "conversation_id": child.conversation_id,
        "turn_id": child.pk,
        "status": child.status,
        "output_text": child.output_text,
        "output_data": child.output_data,
        "error": child.error,
    }


def launch_refusal(parent: Execution, agent_name: str, arguments: Any) -> dict[str, Any] | None:
    """Ask the policy for ``launch_agent``; return the failed tool result when it refuses."""
    if is_allowed("launch_agent", principal=parent.row.principal, turn_id=parent.row.pk,
                  conversation_id=parent.conversation.pk, agent=agent_name,
                  arguments=arguments, turn_principal=parent.row.principal):
        return None
    return {"error": "not_authorized",
            "message": f"You are not allowed to start the {agent_name!r} agent for this principal."}


def create_child(parent: Execution, agent: Agent, execution: ToolExecution, task: str) -> Turn:
    """Create (once per tool execution) the child conversation, turn and task message.

    A fenced write of the parent; the child is found again by ``parent_tool_execution``, so a
    replayed call never creates a second child.
    """
    from .services import new_turn

    depth = parent.row.depth + 1
    existing = Turn.objects.filter(parent_tool_execution_id=execution.pk).first()
    if existing is not None:
        return existing
    with parent.fenced.atomic() as ledger:
        budget.check_depth(ledger, depth)
        return new_turn(
            agent,
            [TextPart(task)],
            parent=parent.row,
            parent_execution=execution,
            principal=parent.row.principal,
        )


def run_inline_child(
    parent: Execution, tool: Tool, call: ToolCallPart, execution: ToolExecution, args: Any
) -> tuple[str, Any, dict[str, Any] | None]:
    """Run a sub-agent synchronously and return its envelope as the tool result."""
    from .runtime import execute

    refusal = launch_refusal(parent, tool.tool_name, call.arguments)
    if refusal is not None:
        return ToolStatus.FAILED, refusal, None
    try:
        child = create_child(parent, tool.agent, execution, args.task)  # type: ignore[attr-defined]
    except BudgetExceeded as exc:
        parent.deferred_error = exc
        return ToolStatus.FAILED, {"error": "budget_exceeded", "message": exc.reason}, None
    parent.emit("sub_agent.delegated", id=call.id, name=tool.tool_name,
                child_conversation_id=child.conversation_id, task_chars=len(args.task))
    agent = tool.agent  # type: ignore[attr-defined]
    execute(child.pk, agent=agent, client=agent.client or parent.client,
            on_event=parent.on_event, root_id=child.root_turn_id)
    child.refresh_from_db()
    status = ToolStatus.COMPLETED if child.status == TurnStatus.COMPLETED else ToolStatus.FAILED
    return status, envelope(child), None
