"""Application controls as a running turn meets them: pause, steering, approvals.

The application records a control on the turn's row under the tree lock (services.controls)
and raises the turn's ``controls_pending`` flag, which makes the worker's next fast-path step
refuse; the step is then decided under the lock, where :class:`~turnkit_django.store.Fenced`
reads the flag, and the loop handles the control at the next step boundary (:func:`boundary`):

* a pause request: the turn becomes ``paused`` and releases its claim; intents written but not
  started go back to ``pending`` (the next claim starts them);
* steering: tool calls of the current response that have not started get a "superseded"
  result, the guidance is appended as user messages, and the turn goes back to the model.

A tool that needs approval parks its call (:func:`approval_gate`), unless the call would be
refused anyway (:func:`~turnkit_django.runtime.calls.precheck`): the execution goes back to
``pending`` with the request, and the turn to ``paused``, claim released, until a person
decides (services.approvals); the next claim runs the approved call or reports the denial.
"""

from __future__ import annotations

import copy
from dataclasses import replace
from datetime import timedelta
from typing import TYPE_CHECKING

from pydantic import ValidationError

from ..base.error_records import ErrorRecord, outcome_unknown
from ..base.serialization import JsonObject
from ..base.states import FINISHED_TOOL_STATUSES, TERMINAL_TURN_STATUSES, Phase, ToolStatus
from ..messages import MessageKind, TextPart, ToolCallPart, ToolResultPart
from ..store import Ledger
from ..store.controls import steering_receipts
from ..store.events import stamp
from ..store.reads import children_by_execution, executions_by_call, running_among, turn_controls
from ..store.turn_columns import statement_time
from ..tools.tool import Tool, ToolContext
from . import budget
from .calls import CallOutcome, precheck, response_calls
from .context import Suspended, TurnContext
from .delegation import child_outcome
from .results import skip_locked

if TYPE_CHECKING:
    from ..models import Message, ToolExecution

SUPERSEDED = ErrorRecord(
    "superseded", "Not executed: superseded by new guidance from the user; read it and plan "
    "again.")


def not_started(ctx: TurnContext) -> list[str]:
    """Intents this worker wrote (``running``) for calls it has not started."""
    if not ctx.started:
        return []
    return running_among(ctx.row.pk, ctx.started)


def boundary(ctx: TurnContext) -> None:
    """Handle the controls waiting for this turn; raise Suspended when it paused."""
    idle = not_started(ctx)
    executions = executions_by_call(ctx.row.pk)
    written: list[Message] = []
    paused = False
    with ctx.fenced.atomic() as ledger:
        if not ctx.fenced.controls_pending:
            return
        controls = turn_controls(ctx.row.pk)
        if controls.pop("pause_requested", None):
            controls.update(paused_at=stamp(ledger.now), paused_from="running")
            ctx.fenced.pause(idle, controls)
            paused = True
        else:
            written = _steer(ctx, ledger, controls, executions, set(idle))
            ctx.fenced.settle_controls(controls)
    if paused:
        ctx.emit("turn.paused", phase=str(ctx.state.phase))
        raise Suspended(ctx.row.pk)
    for message in written:
        ctx.remember(message)


def _steer(ctx: TurnContext, ledger: Ledger, controls: JsonObject,
           executions: dict[str, ToolExecution], idle: set[str]) -> list[Message]:
    """Under the lock: supersede the unstarted calls, append the guidance, back to the model."""
    receipts = steering_receipts(controls)
    waiting = [r for r in receipts if not r.get("message_id")]
    if not waiting:
        return []
    written = _supersede(ctx, executions, idle) if ctx.state.phase == Phase.TOOLS else []
    for receipt in waiting:
        message = ctx.fenced.append("user", [TextPart(str(receipt["text"]))], metadata={
            "source": "steer", "steer_key": receipt["key"],
            "sender_principal": receipt.get("principal")})
        receipt["message_id"] = message.pk
        ctx.fenced.event("turn.steered", key=receipt["key"], message_id=message.pk)
        written.append(message)
    controls["steers"] = [*receipts]
    state = ctx.state.replace(phase=Phase.MODEL, terminal=None)
    if state.reservation is None:
        delta, reservation = budget.reserve_next(ledger, budget.own_budget(ctx.row.options,
                                                                           state))
        state = state.replace(reservation=reservation)
        ctx.fenced.record(state, delta=delta)
    else:
        ctx.fenced.record(state)
    ctx.state = state
    return written


def _supersede(ctx: TurnContext, executions: dict[str, ToolExecution],
               idle: set[str]) -> list[Message]:
    """Every call of the current response that has not started gets a "superseded" result."""
    content = SUPERSEDED.for_model()
    written: list[Message] = []
    children = children_by_execution([e.pk for e in executions.values()
                                       if e.status not in FINISHED_TOOL_STATUSES])
    for call in response_calls(ctx):
        execution = executions.get(call.id)
        child = None if execution is None else children.get(execution.pk)
        if execution is None:
            written.append(skip_locked(ctx, call, "superseded by new guidance from the user"))
        elif child is not None and child.status in TERMINAL_TURN_STATUSES:
            # A delegation whose child finished ran: it keeps its result (the join's).
            outcome = child_outcome(child)
            is_error = outcome.status != ToolStatus.COMPLETED
            ctx.fenced.move_execution(execution.pk, [ToolStatus.PENDING, ToolStatus.RUNNING],
                                      outcome.status, completed_at=statement_time(),
                                      **{"error" if is_error else "result": outcome.content})
            written.append(ctx.fenced.append(
                "tool", [ToolResultPart(call.id, call.name, outcome.content, is_error=is_error)],
                kind=MessageKind.TOOL_RESULT, tool_execution_id=execution.pk))
        elif execution.pk in idle or (execution.status == ToolStatus.PENDING
                                      and execution.attempts == 0):
            ctx.fenced.move_execution(execution.pk, [ToolStatus.PENDING, ToolStatus.RUNNING],
                                      ToolStatus.CANCELLED, result=content)
            written.append(ctx.fenced.append(
                "tool", [ToolResultPart(call.id, call.name, content, is_error=True)],
                kind=MessageKind.TOOL_RESULT, tool_execution_id=execution.pk))
        elif execution.status not in FINISHED_TOOL_STATUSES:
            # Its worker died mid-call (still running, or a replay-safe call recovery reset to
            # pending: attempts > 0), or its child still runs: it may have taken effect, so it
            # is never "not executed".
            unknown = outcome_unknown().for_model()
            ctx.fenced.move_execution(execution.pk, [ToolStatus.PENDING, ToolStatus.RUNNING],
                                      ToolStatus.INTERRUPTED, error=unknown)
            written.append(ctx.fenced.append(
                "tool", [ToolResultPart(call.id, call.name, unknown, is_error=True)],
                kind=MessageKind.TOOL_RESULT, tool_execution_id=execution.pk,
                metadata={"interrupted": True}))
    return written


# --------------------------------------------------------------------------- approvals


def approval_gate(ctx: TurnContext, tool: Tool | None, call: ToolCallPart,
                  execution: ToolExecution) -> tuple[ToolCallPart, CallOutcome | None]:
    """The call to run (with approved, possibly edited arguments) or the denial's outcome;
    parks the call and raises Suspended while it waits for a person."""
    decided = execution.approval or {}
    state = decided.get("state")
    if state == "approved":
        arguments = execution.arguments
        return (call if arguments == call.arguments else replace(call, arguments=arguments)), None
    if state in ("denied", "expired"):
        reason = str(decided.get("reason") or "no reason given")
        return call, CallOutcome.failed(ErrorRecord(
            "approval_denied", f"A person did not approve this call ({state}: {reason}). Do not "
            "call it again with the same arguments unless the user asks you to."))
    if state is None and not _needs_approval(ctx, tool, call, execution):
        return call, None
    if state is None and tool is not None:
        # Refuse first what would be refused anyway (a reused call id, not authorized,
        # invalid, the tool policy): never ask a person to approve a call that cannot run.
        # An approved call is checked again, by invoke, just before it runs.
        refusal, _ = precheck(ctx, tool, call)
        if refusal is not None:
            return call, CallOutcome.failed(refusal)
    _park(ctx, tool, call, execution)
    raise Suspended(ctx.row.pk)


def _needs_approval(ctx: TurnContext, tool: Tool | None, call: ToolCallPart,
                    execution: ToolExecution) -> bool:
    if tool is None or tool.approval is False or call.raw_arguments is not None:
        return False
    if tool.approval is True:
        return True
    try:
        args = tool.validate(call.arguments)
    except ValidationError:
        return False  # the call fails its validation instead
    tool_ctx = ToolContext(turn=ctx.handle(), conversation_id=ctx.row.conversation_id,
                           execution_id=execution.pk, tool_call_id=call.id,
                           principal=copy.deepcopy(ctx.principal),
                           context=copy.deepcopy((ctx.row.options or {}).get("context") or {}))
    try:
        return tool.needs_approval(args, tool_ctx)
    except Exception:  # a broken decision never lets a call through unapproved
        return True


def _park(ctx: TurnContext, tool: Tool | None, call: ToolCallPart,
          execution: ToolExecution) -> None:
    timeout = None if tool is None else tool.approval_timeout
    with ctx.fenced.atomic() as ledger:
        expires = None if timeout is None else stamp(ledger.now + timedelta(seconds=timeout))
        approval = {"state": "requested", "requested_at": stamp(ledger.now),
                    "arguments": call.arguments}
        if expires is not None:  # absent, not null: a JSON null sorts before every stamp
            approval["expires_at"] = expires
        controls = turn_controls(ctx.row.pk)
        controls.update(paused_at=stamp(ledger.now), paused_from="running")
        if controls.pop("pause_requested", None):  # the operator's pause outlives the decision
            controls["pause_held"] = True
        ctx.fenced.event("approval.requested", call_id=call.id, execution_id=execution.pk,
                         tool=call.name, arguments=call.arguments, expires_at=expires)
        ctx.fenced.await_approval(execution.pk, approval, controls)
    ctx.emit("approval.requested", id=call.id, name=call.name, tool_execution_id=execution.pk,
             expires_at=expires)


__all__ = ["SUPERSEDED", "approval_gate", "boundary", "not_started"]
