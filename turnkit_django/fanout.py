"""Background sub-agents: fan a group of delegations out to submitted children, wait, join.

When a background turn's response holds a contiguous group of sub-agent calls, each call gets,
in call order and in ONE fenced transaction per call: its tool execution (``pending``, a tool slot
reserved), a child turn in a fresh child conversation (the task is its only input; it acts for the
parent's principal, one level deeper, under the parent's root and its shared budget), the child's
submission, and a wait edge from the parent to the child (decided under the wait-graph lock, after
the tree lock). A crash between two of these transactions, or between launching and suspending,
never creates a second child: the execution and its child commit together, and a replay finds the
child again by ``parent_tool_execution``.

Then the parent suspends: ``waiting``, claim released (``fence`` + 1, ``claimed_by`` cleared), its
worker freed. The executions stay ``pending`` and get no result yet. Maintenance moves the parent
back to ``pending`` once every child has finished (or the root deadline passed: the parent then
fails with the timeout); the parent resumes in its tools phase and records each child's result
envelope as that call's result, in CALL order whatever the completion order. A child that failed
or was cancelled is a failed tool result carrying its envelope, not a failure of the parent.

A call refused before launch (invalid arguments, the ``tool``, ``launch_agent`` or ``wait``
action denied) launches nothing: its refusal waits in the execution (``pending``, ``error`` set)
and becomes its result at the join, in call order. A call over a root-wide limit (tool slots,
depth) gets its failed result at once and fails the parent with the budget reason, as in any turn.
Authorization is asked once, at launch: a resumed parent joins what it launched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from . import budget, failpoints
from .authorization import is_allowed
from .exceptions import BudgetExceeded
from .messages import ToolResultPart
from .models import ToolExecution, Turn, Wait
from .repair import unknown_result
from .states import ACTIVE_TURN_STATUSES, FINISHED_TOOL_STATUSES, ToolStatus, TurnStatus
from .subagents import create_child, envelope, launch_refusal
from .tools.base import validation_message

if TYPE_CHECKING:
    from .agents import Agent
    from .clients.base import Client
    from .messages import ToolCallPart
    from .runtime import Execution
    from .tools.base import Tool

_ACTIVE = [str(s) for s in ACTIVE_TURN_STATUSES]


class _Refused(Exception):
    """Roll a launch back and record ``content`` as the call's result instead."""

    def __init__(self, content: dict[str, Any]) -> None:
        super().__init__(content.get("message"))
        self.content = content


def delegates(ex: Execution, call: ToolCallPart) -> bool:
    """Whether ``call`` asks one of the agent's sub-agents."""
    tool = ex.tools.get(call.name)
    return tool is not None and tool.builtin == "sub_agent"


def run_group(ex: Execution, calls: Sequence[ToolCallPart], first: ToolCallPart,
              existing: dict[str, ToolExecution]) -> None:
    """Launch the group of delegations starting at ``first``, then join it or suspend.

    Raises :class:`~turnkit_django.runtime.Suspended` once the parent waits. When every child has
    finished, records the results in call order and updates ``existing`` so the caller's loop
    moves past the group.
    """
    from .runtime import Suspended

    start = calls.index(first)
    group: list[ToolCallPart] = []
    for call in calls[start:]:
        if not delegates(ex, call):
            break
        execution = existing.get(call.id)
        if execution is None or execution.status not in FINISHED_TOOL_STATUSES:
            group.append(call)
    for call in group:
        if call.id not in existing:
            existing[call.id] = _launch(ex, call, ex.tools[call.name])
            failpoints.hit("after_child_launch")
    ids = [existing[call.id].pk for call in group]
    launched = Turn.objects.filter(parent_tool_execution_id__in=ids)
    if suspend(ex, list(launched.values_list("pk", flat=True))):
        raise Suspended(ex.row.pk)
    children = {child.parent_tool_execution_id: child for child in launched.all()}
    for call in group:
        execution = existing[call.id]
        child = children.get(execution.pk)
        if child is None:
            status, content = ToolStatus.FAILED, execution.error or unknown_result()
        else:
            status = (ToolStatus.COMPLETED if child.status == TurnStatus.COMPLETED
                      else ToolStatus.FAILED)
            content = envelope(child)
        ex._finish(execution, call, status, content,
                   expected=(ToolStatus.PENDING, ToolStatus.RUNNING))
        execution.status = status


def suspend(ex: Execution, target_ids: Sequence[str], *,
            pending_execution: str | None = None) -> bool:
    """Release the claim and wait while a target is unfinished; False when all have finished.

    One fenced transaction: the turn becomes ``waiting`` with its fence moved on and no owner,
    so this worker can never write to it again and maintenance releases it when the targets
    finish. A turn past its root deadline (released by maintenance to fail) raises
    :class:`BudgetExceeded` instead of waiting again. ``pending_execution`` is a running tool
    execution that goes back to ``pending`` until the turn resumes (``wait_for``).
    """
    with ex.fenced.atomic() as ledger:
        if not Turn.objects.filter(pk__in=list(target_ids), status__in=_ACTIVE).exists():
            return False
        budget.check_open(ledger, timezone.now())
        if pending_execution is not None:
            ex.fenced.set_execution(pending_execution, [ToolStatus.RUNNING],
                                    status=ToolStatus.PENDING)
        ex.fenced.update_turn(status=TurnStatus.WAITING, fence=F("fence") + 1, claimed_by="")
    ex.emit("turn.waiting", targets=list(target_ids))
    return True


def add_edges(waiter: Turn, targets: Sequence[Turn]) -> None:
    """Insert wait edges from ``waiter`` (once each). Caller holds the tree lock; raises
    :class:`~turnkit_django.exceptions.WaitError` when a rule refuses one."""
    from .waits import check_edge, graph_lock

    graph_lock()
    for target in targets:
        check_edge(waiter, target)
    have = set(Wait.objects.filter(waiter_id=waiter.pk).values_list("target_id", flat=True))
    Wait.objects.bulk_create([Wait(waiter_id=waiter.pk, target_id=target.pk)
                              for target in targets if target.pk not in have])


def inherited_client(row: Turn, agent: Agent) -> Client | None:
    """The client of the nearest ancestor's agent, for a sub-agent turn without its own client.

    Inline children get their parent's client passed in; a background child is rebuilt by a
    worker from the registry, so it finds it here. None when the agent has a client of its own.
    """
    from .exceptions import ConfigurationError
    from .registry import get_agent

    if agent.client is not None:
        return None
    parent_id = row.parent_turn_id
    while parent_id is not None:
        name, parent_id = Turn.objects.filter(pk=parent_id).values_list(
            "agent_name", "parent_turn_id").get()
        try:
            client = get_agent(name).client
        except ConfigurationError:
            return None
        if client is not None:
            return client
    return None


# --------------------------------------------------------------------------- launching


def _precheck(ex: Execution, tool: Tool, call: ToolCallPart) -> tuple[dict[str, Any] | None,
                                                                        Any]:
    """Return (refusal, validated arguments) for a delegation, before anything is written."""
    if call.raw_arguments is not None:
        return {"error": "invalid_arguments",
                "message": f"The arguments for {call.name!r} are not a JSON object."}, None
    if not is_allowed("tool", principal=ex.row.principal, tool=call.name,
                      arguments=call.arguments, turn_id=ex.row.pk,
                      conversation_id=ex.conversation.pk):
        return {"error": "not_authorized",
                "message": f"You are not allowed to call {call.name!r} for this principal."}, None
    try:
        args = tool.validate(call.arguments)
    except ValidationError as exc:
        return validation_message(call.name, exc), None
    return launch_refusal(ex, call.name, call.arguments), args


def _launch(ex: Execution, call: ToolCallPart, tool: Tool) -> ToolExecution:
    """Create the call's execution and, unless refused, its submitted child and wait edge."""
    refusal, args = _precheck(ex, tool, call)
    try:
        if refusal is None:
            try:
                return _open(ex, call, tool, args.task, None)
            except _Refused as refused:
                refusal = refused.content
        return _open(ex, call, tool, None, refusal)
    except BudgetExceeded as exc:
        if exc.limit not in ("timeout", "max_spend"):  # refused slot or depth: answer the call
            _deny(ex, call, exc)
        raise


def _open(ex: Execution, call: ToolCallPart, tool: Tool, task: str | None,
          refusal: dict[str, Any] | None) -> ToolExecution:
    """One fenced transaction: reserve a tool slot, record the execution, launch the child."""
    from .services import submit

    now = timezone.now()
    with ex.fenced.atomic() as ledger:
        budget.check_open(ledger, now)
        update, denied = budget.reserve_tool(ledger, call.name)
        if denied is not None:
            raise BudgetExceeded(denied, limit=budget.limit_of(denied))
        ex.fenced.update_root(**(update or {}))
        execution = ex.fenced.create_execution(
            tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
            status=ToolStatus.PENDING, error=refusal, attempts=0 if refusal else 1,
            started_at=None if refusal else now,
        )
        if task is None:
            return execution
        child = create_child(ex, tool.agent, execution, task)  # type: ignore[attr-defined]
        child = submit(child)
        if not is_allowed("wait", principal=ex.row.principal, turn_id=ex.row.pk,
                          target_ids=[child.pk], turn_principal=ex.row.principal,
                          target_principals=[child.principal]):
            raise _Refused({"error": "not_authorized",
                            "message": f"You are not allowed to wait for {call.name!r} for "
                                       "this principal."})
        add_edges(ex.row, [child])
    ex.emit("sub_agent.delegated", id=call.id, name=call.name, child_turn_id=child.pk,
            child_conversation_id=child.conversation_id, task_chars=len(task), background=True)
    return execution


def _deny(ex: Execution, call: ToolCallPart, exc: BudgetExceeded) -> None:
    """Record a delegation refused by a root-wide limit: its failed result, written at once."""
    denial = {"error": "budget_exceeded", "message": exc.reason}
    with ex.fenced.atomic():
        execution = ex.fenced.create_execution(
            tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
            status=ToolStatus.FAILED, error=denial, budget_denied=True,
            completed_at=timezone.now(),
        )
        message = ex.fenced.append(
            "tool", [ToolResultPart(call.id, call.name, denial, is_error=True)],
            kind="tool_result", tool_execution_id=execution.pk,
        )
    ex._remember(message)


__all__ = ["add_edges", "delegates", "inherited_client", "run_group", "suspend"]
