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

from django.utils import timezone

from ..agents import SubAgentTool
from ..base import failpoints
from ..base.error_records import ErrorRecord, budget_exceeded, not_authorized, outcome_unknown
from ..base.ids import new_id
from ..base.states import FINISHED_TOOL_STATUSES, ToolStatus
from ..exceptions import BudgetExceeded
from ..messages import MessageKind, ToolCallPart, ToolResultPart
from ..observability import tracing
from ..store.limits import limit_of
from ..store.reads import any_active, child_ids, children_by_execution
from ..store.waits import add_edges
from . import budget
from .authorization import is_allowed
from .calls import precheck
from .context import Suspended, TurnContext
from .delegation import child_outcome, child_task, create_child, launch_refusal
from .results import delegates, finish
from .submission import submit

if TYPE_CHECKING:
    from ..models import ToolExecution


class _Refused(Exception):
    """Roll a launch back and record ``record`` as the call's result instead."""

    def __init__(self, record: ErrorRecord) -> None:
        super().__init__(record.message)
        self.record = record


def run_group(ctx: TurnContext, calls: Sequence[ToolCallPart], first: ToolCallPart,
              existing: dict[str, ToolExecution]) -> None:
    """Launch the group of delegations starting at ``first``, then join it or suspend.

    Raises :class:`~turnkit_django.runtime.context.Suspended` once the parent waits. When every
    child has finished, records the results in call order and updates ``existing`` so the
    caller's loop moves past the group.
    """
    start = calls.index(first)
    group: list[ToolCallPart] = []
    for call in calls[start:]:
        if not delegates(ctx, call):
            break
        execution = existing.get(call.id)
        if execution is None or execution.status not in FINISHED_TOOL_STATUSES:
            group.append(call)
    for call in group:
        if call.id not in existing:
            tool = ctx.tools[call.name]
            if not isinstance(tool, SubAgentTool):  # pragma: no cover - delegates() checked it
                raise TypeError(f"{call.name!r} is not a sub-agent")
            existing[call.id] = _launch(ctx, call, tool)
            failpoints.hit("after_child_launch")
    ids = [existing[call.id].pk for call in group]
    if suspend(ctx, child_ids(ids)):
        raise Suspended(ctx.row.pk)
    children = children_by_execution(ids)
    for call in group:
        execution = existing[call.id]
        child = children.get(execution.pk)
        status: str
        if child is None:
            status, content = ToolStatus.FAILED, execution.error or outcome_unknown().for_model()
        else:
            outcome = child_outcome(child)
            status, content = outcome.status, outcome.content
        finish(ctx, execution, call, status, content,
               expected=(ToolStatus.PENDING, ToolStatus.RUNNING))


def suspend(ctx: TurnContext, target_ids: Sequence[str], *,
            pending_execution: str | None = None) -> bool:
    """Release the claim and wait while a target is unfinished; False when all have finished.

    One fenced transaction: the turn becomes ``waiting`` with its fence moved on and no owner,
    so this worker can never write to it again and maintenance releases it when the targets
    finish. A turn past its root deadline (released by maintenance to fail) raises
    :class:`BudgetExceeded` instead of waiting again. ``pending_execution`` is a running tool
    execution that goes back to ``pending`` until the turn resumes (``wait_for``).
    """
    with ctx.fenced.atomic() as ledger:
        if not any_active(target_ids):
            return False
        budget.check_open(ledger)
        if pending_execution is not None:
            ctx.fenced.move_execution(pending_execution, [ToolStatus.RUNNING],
                                      ToolStatus.PENDING)
        ctx.fenced.suspend()
    ctx.emit("turn.waiting", targets=list(target_ids))
    return True


# --------------------------------------------------------------------------- launching


def _precheck(ctx: TurnContext, tool: SubAgentTool,
              call: ToolCallPart) -> tuple[ErrorRecord | None, Any]:
    """Return (refusal, validated arguments) for a delegation, before anything is written."""
    refusal, args = precheck(ctx, tool, call)
    if refusal is not None:
        return refusal, None
    # ``agent`` is the agent the call starts (a typed tool's name is not its agent's).
    return launch_refusal(ctx, tool.agent.name, call.arguments), args


def _launch(ctx: TurnContext, call: ToolCallPart, tool: SubAgentTool) -> ToolExecution:
    """The launch under the call's ``execute_tool`` span (the child's trace continues it)."""
    with tracing.tool_span(ctx.row.pk, ctx.agent.name, call.name, call.id,
                           call.arguments) as span:
        execution = _launch_call(ctx, call, tool)
        span.outcome(ToolStatus.FAILED if execution.error else "launched", execution.error)
    return execution


def _launch_call(ctx: TurnContext, call: ToolCallPart, tool: SubAgentTool) -> ToolExecution:
    """Create the call's execution and, unless refused, its submitted child and wait edge."""
    refusal, args = _precheck(ctx, tool, call)
    task = ""
    if refusal is None:
        refusal, task = child_task(tool, args)  # application code: before the transaction
    try:
        if refusal is None:
            try:
                return _open(ctx, call, tool, task, None)
            except _Refused as refused:
                refusal = refused.record
        return _open(ctx, call, tool, None, refusal)
    except BudgetExceeded as exc:
        if exc.limit not in ("timeout", "max_spend"):  # refused slot or depth: answer the call
            _deny(ctx, call, exc)
        raise


def _open(ctx: TurnContext, call: ToolCallPart, tool: SubAgentTool, task: str | None,
          refusal: ErrorRecord | None) -> ToolExecution:
    """One fenced transaction: reserve a tool slot, record the execution, launch the child."""
    child_id = new_id("turn")
    # Asked before the transaction: the child will act for the parent's principal.
    if task is not None and not is_allowed(
            "wait", principal=ctx.principal, turn_id=ctx.row.pk, target_ids=[child_id],
            turn_principal=ctx.principal, target_principals=[ctx.principal]):
        raise _Refused(not_authorized(f"You are not allowed to wait for {call.name!r} for "
                                      "this principal."))
    with ctx.fenced.atomic() as ledger:
        now = ledger.now
        budget.check_open(ledger)
        own = budget.own_budget(ctx.row.options, ctx.state)
        slot, denied = budget.reserve_tool(ledger, call.name, own)
        if denied is not None:
            raise BudgetExceeded(denied, limit=limit_of(denied))
        state = None if own is None else own.state.counted(call.name)
        if state is not None:  # the turn's own count, with the slot
            ctx.fenced.record(state, delta=slot)
        else:
            ctx.fenced.charge_root(slot)
        execution = ctx.fenced.open_execution(
            call, ToolStatus.PENDING, error=None if refusal is None else refusal.for_model(),
            attempts=0 if refusal else 1, started_at=None if refusal else now)
        child = None
        if task is not None:
            child = submit(create_child(ctx, tool.agent, execution, task, turn_id=child_id))
            add_edges(ctx.row, [child])
    if state is not None:
        ctx.state = state
    if child is None or task is None:
        return execution
    ctx.emit("sub_agent.delegated", id=call.id, name=call.name, agent=tool.agent.name,
             child_turn_id=child.pk, child_conversation_id=child.conversation_id,
             task_chars=len(task), background=True)
    return execution


def _deny(ctx: TurnContext, call: ToolCallPart, exc: BudgetExceeded) -> None:
    """Record a delegation refused by a root-wide limit: its failed result, written at once."""
    denial = budget_exceeded(exc.reason).for_model()
    with ctx.fenced.atomic():
        execution = ctx.fenced.open_execution(call, ToolStatus.FAILED, error=denial,
                                              budget_denied=True, completed_at=timezone.now())
        message = ctx.fenced.append(
            "tool", [ToolResultPart(call.id, call.name, denial, is_error=True)],
            kind=MessageKind.TOOL_RESULT, tool_execution_id=execution.pk)
    ctx.remember(message)


__all__ = ["run_group", "suspend"]
