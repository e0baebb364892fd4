"""Sub-agent delegation: a child turn in a fresh child conversation, sharing the root's budget.

Children get only the explicit task, the parent's principal, depth + 1, and the parent's root
(shared budgets). Inline, the child runs synchronously inside the parent's tool call; in the
background a group of delegations fans out (:mod:`.fanout`).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..agents import AgentDefinition, SubAgentTool, get_agent
from ..base.error_records import ErrorRecord, budget_exceeded, not_authorized
from ..base.states import TERMINAL_TURN_STATUSES, ToolStatus, TurnStatus
from ..clients import Client
from ..exceptions import BudgetExceeded, ConfigurationError
from ..messages import TextPart, ToolCallPart
from ..store.controls import steering_receipts
from ..store.events import stamp
from ..store.reads import agent_and_parent, child_turn, turn_controls
from . import budget
from .authorization import is_allowed
from .calls import CallOutcome
from .context import ControlPending, Suspended, TurnContext
from .creation import new_turn

if TYPE_CHECKING:
    from ..models import ToolExecution, Turn


def launch_refusal(parent: TurnContext, agent_name: str, arguments: Any) -> ErrorRecord | None:
    """Ask the policy for ``launch_agent``; return the failed tool result when it refuses."""
    if is_allowed("launch_agent", principal=parent.principal, turn_id=parent.row.pk,
                  conversation_id=parent.row.conversation_id, agent=agent_name,
                  arguments=arguments, turn_principal=parent.principal):
        return None
    return not_authorized(f"You are not allowed to start the {agent_name!r} agent for this "
                          "principal.")


def child_task(tool: SubAgentTool, args: Any) -> tuple[ErrorRecord | None, str]:
    """Build the child's task from the validated arguments (application code, no transaction
    open); a failure is the call's failed result."""
    try:
        task = tool.task_for(args)
    except Exception as exc:
        return ErrorRecord(type(exc).__name__, f"Building the task for {tool.tool_name!r} "
                                               f"failed: {exc}"), ""
    if not isinstance(task, str) or not task.strip():
        return ErrorRecord("invalid_task", f"The task built for {tool.tool_name!r} is "
                                           f"{type(task).__name__} {task!r:.80}; a sub-agent "
                                           "tool must build a non-empty string."), ""
    return None, task


def child_of(execution: ToolExecution) -> Turn | None:
    """The child a delegation's execution launched, if it did (one per execution)."""
    return child_turn(execution.pk)


def create_child(parent: TurnContext, agent: AgentDefinition, execution: ToolExecution,
                 task: str, *, turn_id: str | None = None) -> Turn:
    """Create (once per tool execution) the child conversation, turn and task message.

    A fenced write of the parent; the child is found again by ``parent_tool_execution``, so a
    replayed call never creates a second child. ``turn_id`` is the id the child gets (one the
    caller asked a policy about before opening its transaction).

    A control recorded for the parent meanwhile (a pause asked while the launch was being
    authorized) wins: the transaction reads it under the tree lock and raises ControlPending,
    so no child is created and the parent's call is started again after the control.
    """
    existing = child_of(execution)
    if existing is not None:
        return existing
    with parent.fenced.atomic() as ledger:
        if parent.fenced.controls_pending:
            raise ControlPending(parent.row.pk)
        budget.check_depth(ledger, parent.row.depth + 1)
        return new_turn(agent, [TextPart(task)], parent=parent.row, parent_execution=execution,
                        principal=parent.principal, turn_id=turn_id)


def child_outcome(child: Turn) -> CallOutcome:
    """A finished child as its parent's tool result: a failure is a result, not the parent's."""
    status = ToolStatus.COMPLETED if child.status == TurnStatus.COMPLETED else ToolStatus.FAILED
    return CallOutcome(status, child.envelope())


def run_inline_child(parent: TurnContext, tool: SubAgentTool, call: ToolCallPart,
                     execution: ToolExecution, args: Any) -> CallOutcome:
    """Run a sub-agent synchronously and return its envelope as the tool result."""
    task = ""
    refusal = launch_refusal(parent, tool.agent.name, call.arguments)
    if refusal is None:
        refusal, task = child_task(tool, args)
    if refusal is not None:
        return CallOutcome.failed(refusal)
    try:
        child = create_child(parent, tool.agent, execution, task)
    except BudgetExceeded as exc:
        return CallOutcome.failed(budget_exceeded(exc.reason), error=exc)
    if child.status == TurnStatus.PENDING and child.fence == 0:  # not a resumed one
        parent.emit("sub_agent.delegated", id=call.id, name=tool.tool_name,
                    agent=tool.agent.name, child_turn_id=child.pk,
                    child_conversation_id=child.conversation_id, task_chars=len(task))
    if child.status not in TERMINAL_TURN_STATUSES:
        if child.status == TurnStatus.PENDING:  # new, or resumed with its parent
            agent = tool.agent
            parent.run_child(child, agent, agent.client or parent.client)
            child.refresh_from_db()
        if child.status not in TERMINAL_TURN_STATUSES:
            _park_on_child(parent, execution, child)
    return child_outcome(child)


def _park_on_child(parent: TurnContext, execution: ToolExecution, child: Turn) -> None:
    """The inline child stopped before it ended (a call of its waits for a person, or a pause
    reached it): its parent's call has no result yet, so the parent parks too, never reporting
    the child failed. A decision or a resume continues the chain from its top (services), and
    the call, started again, runs the same child on."""
    with parent.fenced.atomic() as ledger:
        controls = turn_controls(parent.row.pk)
        controls.pop("pause_requested", None)  # a pause asked of the parent holds: it parks
        controls.update(paused_at=stamp(ledger.now), paused_from="running",
                        inline_child=child.pk)
        unread = any(not r.get("message_id") for r in steering_receipts(controls))
        # The call goes back to pending keeping its attempt: the child may have taken effects.
        parent.fenced.move_execution(execution.pk, [ToolStatus.RUNNING], ToolStatus.PENDING)
        parent.fenced.pause([], controls, transition="await_child", controls_pending=unread)
    parent.emit("turn.paused", phase=str(parent.state.phase), child_turn_id=child.pk)
    raise Suspended(parent.row.pk)


def inherited_client(row: Turn, agent: AgentDefinition) -> Client | None:
    """The client of the nearest ancestor's agent, for a sub-agent turn without its own client.

    Inline children get their parent's client passed in; a background child is rebuilt by a
    worker from the registry, so it finds it here. None when the agent has a client of its own.
    """
    if agent.client is not None:
        return None
    parent_id = row.parent_turn_id
    while parent_id is not None:
        name, parent_id = agent_and_parent(parent_id)
        try:
            client = get_agent(name).client
        except ConfigurationError:
            return None
        if client is not None:
            return client
    return None


__all__ = ["child_of", "child_outcome", "child_task", "create_child", "inherited_client",
           "launch_refusal", "run_inline_child"]
