"""The tools phase of a claimed turn: every tool call of the persisted response to one result.

Calls run in order, each outside any transaction; :mod:`.results` writes each call's intent
before it starts and its result after (one commit per step, see there).

An intent says the call is next, not that it started: a tool that is not replay-safe records
its start (``started_at``) in one statement of its own just before its code runs
(:meth:`~turnkit_django.store.Fenced.start_call`). A worker that dies before that statement
never started the call, so recovery puts it back to ``pending`` and the next worker runs it;
one that dies after it leaves the call "outcome unknown" (a replay-safe tool is re-run with its
idempotency key either way).

A resumed turn (no batch in memory) reads its executions, and starts a call without a
committed intent in a transaction of its own first, as does a call after a background
delegation group.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING

from django.utils import timezone

from ..agents import LOAD_SKILL, SubAgentTool
from ..base import failpoints
from ..base.error_records import ErrorRecord, outcome_unknown
from ..base.serialization import JsonValue, to_json
from ..base.states import FINISHED_TOOL_STATUSES, Phase, ToolStatus
from ..conf import turnkit_settings
from ..messages import ToolCallPart
from ..observability import tracing
from ..store import LedgerDelta, Terminal
from ..store.reads import executions_by_call
from ..tools.coordination import CoordinationTool
from ..tools.tool import Tool, ToolContext
from . import budget, completion, coordination, delegation, fanout, retries
from .calls import CallOutcome, precheck, response_calls, turn_tools, unknown_tool
from .context import ControlPending, ToolBinding, TurnContext
from .controls import approval_gate
from .results import Opened, Then, delegates, finish, leave, open_call, skip

if TYPE_CHECKING:
    from ..models import ToolExecution


def tools_step(ctx: TurnContext) -> None:
    """Run the response's tool calls in order, each to its one result, then end the batch."""
    calls = response_calls(ctx)
    existing = ctx.batch
    if existing is None:
        existing = executions_by_call(ctx.row.pk)
    ctx.batch = None
    terminal = ctx.state.terminal
    for index, call in enumerate(calls):
        if ctx.state.phase != Phase.TOOLS:
            return  # a result's transaction moved the turn on
        execution = existing.get(call.id)
        if execution is not None and execution.status in FINISHED_TOOL_STATUSES:
            continue
        reason = completion.skip_reason(ctx, call, terminal)
        if reason is not None:
            skip(ctx, call, reason)
            continue
        if delegates(ctx, call):
            fanout.run_group(ctx, calls, call, existing)
            continue
        rest = [c for c in calls[index + 1:] if existing.get(c.id) is None
                or existing[c.id].status not in FINISHED_TOOL_STATUSES]
        ended = run_call(ctx, call, execution, rest, existing)
        if ended is not None:
            terminal = ended
    if ctx.state.phase == Phase.TOOLS:  # no result's transaction ended the batch
        delta = LedgerDelta()
        with ctx.fenced.atomic() as ledger:
            state = leave(ctx, ledger, terminal, delta)
            ctx.fenced.record(state, delta=delta)
        ctx.state = state


def _start(ctx: TurnContext, call: ToolCallPart,
           execution: ToolExecution | None) -> ToolExecution | None:
    """Record the intent (or restart a replay-safe one); return None if it was interrupted."""
    tool = ctx.tools.get(call.name)
    safe = tool is None or tool.replay_safe
    if execution is not None and execution.status == ToolStatus.RUNNING and not safe and (
            execution.started_at is not None):
        # Its worker died mid-call and nobody reconciled it: the outcome is unknown.
        finish(ctx, execution, call, ToolStatus.INTERRUPTED, outcome_unknown().for_model(),
               expected=(ToolStatus.RUNNING,), interrupted=True)
        return None
    opened: Opened | None = None
    state = ctx.state
    with ctx.fenced.atomic() as ledger:
        if execution is None:
            delta = LedgerDelta()
            opened = open_call(ctx, ledger, call, delta,
                               final_save=completion.exempt(ctx, call))
            if opened.counted:
                state = state.counted(call.name)
                ctx.fenced.record(state, delta=delta)
            else:
                ctx.fenced.charge_root(delta)
            execution = opened.execution
        else:
            budget.check_open(ledger, spend=not completion.exempt(ctx, call))
            ctx.fenced.restart_execution(execution.pk, started=safe)
            execution.started_at = timezone.now() if safe else None  # as the row has it
    ctx.state = state
    if opened is not None and opened.denial is not None:
        ctx.remember(opened.denial)
    else:  # written or restarted, not started yet: a control before it puts it back
        ctx.started.add(execution.pk)
    if opened is not None and opened.error is not None:
        raise opened.error
    return execution


def run_call(ctx: TurnContext, call: ToolCallPart, execution: ToolExecution | None,
             rest: list[ToolCallPart], existing: dict[str, ToolExecution]) -> Terminal | None:
    """Run one tool call to its single result; return the terminal record if it ends the turn."""
    ctx.check_stop()  # a step boundary: a worker shutting down gives the turn back here
    if ctx.fenced.controls_pending:
        raise ControlPending(ctx.row.pk)
    if execution is None or execution.pk not in ctx.started:
        execution = _start(ctx, call, execution)
        if execution is None:
            return None
    tool = ctx.tools.get(call.name)
    call, refused = approval_gate(ctx, tool, call, execution)
    ctx.emit("tool_call.started", id=call.id, name=call.name)
    failpoints.hit("after_tool_intent")
    if refused is None and execution.started_at is None:
        ctx.fenced.start_call(execution.pk)  # not replay-safe: its start, before any effect
    with tracing.tool_span(ctx.row.pk, ctx.agent.name, call.name, call.id,
                           call.arguments) as span:
        outcome = refused or invoke(ctx, tool, call, execution)
        span.outcome(outcome.status, outcome.content)
    failpoints.hit("after_tool_call")
    then = Then(rest, outcome.terminal, existing) if outcome.error is None else None
    error = finish(ctx, execution, call, outcome.status, outcome.content,
                   expected=(ToolStatus.RUNNING,), then=then)
    if call.name == LOAD_SKILL and outcome.status == ToolStatus.COMPLETED:
        ctx.tools = turn_tools(ctx.agent, ctx.row.pk, ctx.state.listed_tools)
    failpoints.hit("after_tool_commit")
    if outcome.error is not None:
        raise outcome.error
    if error is not None:
        raise error
    return outcome.terminal


def invoke(ctx: TurnContext, tool: Tool | None, call: ToolCallPart,
           execution: ToolExecution) -> CallOutcome:
    """Run the tool (no transaction open); every failure becomes a result the model reads."""
    if tool is None:
        return CallOutcome.failed(unknown_tool(ctx.agent, call.name, ctx.tools))
    refusal, args = precheck(ctx, tool, call)
    if refusal is not None:
        return CallOutcome.failed(refusal)
    if isinstance(tool, SubAgentTool):
        return delegation.run_inline_child(ctx, tool, call, execution, args)
    if isinstance(tool, CoordinationTool):
        return coordination.execute(ctx, tool, call, execution, args)

    def attempt() -> JsonValue:  # one run of the tool (each attempt of one with retries)
        tool_ctx = ToolContext(
            turn=ctx.handle(ToolBinding(ctx, execution)),  # media calls write under this claim
            conversation_id=ctx.row.conversation_id,
            execution_id=execution.pk,
            tool_call_id=call.id,
            principal=copy.deepcopy(ctx.principal),
            context=copy.deepcopy((ctx.row.options or {}).get("context") or {}),
        )
        return to_json(tool.call(tool_ctx, args))

    limit = tool.timeout if tool.timeout is not None else turnkit_settings.TOOL_TIMEOUT
    result = retries.run_attempts(ctx, tool, call, execution, limit, attempt)
    if isinstance(result, ErrorRecord):
        return CallOutcome.failed(result)
    terminal = None
    if tool.terminal:
        terminal = Terminal(call.name, call.id, tool.completion_text(result))
    return CallOutcome(ToolStatus.COMPLETED, result, terminal)


__all__ = ["invoke", "response_calls", "run_call", "tools_step"]
