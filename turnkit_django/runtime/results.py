"""The writes of the tools phase: a call's intent, its one result, and the end of a batch.

A call's *intent* (its execution row, ``running``, with a root-wide tool slot reserved) commits
before its side effect starts, and its result (compare-and-set of the execution plus exactly one
``tool_result`` message) commits after. To keep one commit per step, the intent of a call is
written by the transaction before it: the one recording the model response (first call) or the
previous call's result (later calls). The result of the last call of a batch commits with what
follows it: the move to the ``model`` phase with the next iteration reserved, or, after a
terminal tool, the "not executed" results of the calls after it and the move to ``output``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.utils import timezone

from ..agents import SubAgentTool
from ..base.error_records import budget_exceeded, not_executed
from ..base.serialization import render_result
from ..base.states import Phase, ToolStatus
from ..exceptions import BudgetExceeded, LostClaim
from ..messages import MessageKind, ToolCallPart, ToolResultPart
from ..store import Candidate, Ledger, LedgerDelta, Terminal, TurnState
from ..store.limits import limit_of
from . import budget, completion
from .context import TurnContext

if TYPE_CHECKING:
    from ..models import Message, ToolExecution


@dataclass(frozen=True)
class Opened:
    """A call's execution as its intent wrote it; a slot denial gives it its result at once."""

    execution: ToolExecution
    denial: Message | None = None
    error: BudgetExceeded | None = None
    #: The slot counts for the turn's own limits too: the caller writes the state that says so
    #: (``TurnState.counted``) in the same transaction.
    counted: bool = False


def open_call(ctx: TurnContext, ledger: Ledger, call: ToolCallPart,
              delta: LedgerDelta, *, final_save: bool = False) -> Opened:
    """Under the tree lock: reserve a tool slot and write the call's intent (``running``; for
    a tool that is not replay-safe with no ``started_at`` until it starts).

    A slot refused by a root-wide limit gives the call its failed result at once (returned with
    the error that fails the turn). Raises BudgetExceeded, writing nothing, when the tree ran out
    of time or money (a budget completion's ``final_save`` skips the spend check). The slot's
    ledger change is added to ``delta``. A turn with limits of its own (a child's) is refused
    by them the same way, counted on ``ctx.state``.
    """
    now = ledger.now
    budget.check_open(ledger, spend=not final_save)
    own = budget.own_budget(ctx.row.options, ctx.state)
    slot, denied = budget.reserve_tool(ledger, call.name, own)
    if denied is not None:
        denial = budget_exceeded(denied).for_model()
        created = ctx.fenced.open_execution(call, ToolStatus.FAILED, error=denial,
                                            budget_denied=True, completed_at=now)
        message = ctx.fenced.append(
            "tool", [ToolResultPart(call.id, call.name, denial, is_error=True)],
            kind=MessageKind.TOOL_RESULT, tool_execution_id=created.pk)
        return Opened(created, message, BudgetExceeded(denied, limit=limit_of(denied)))
    delta.add(slot)
    # A call that is not replay-safe records its start in a statement of its own, just before
    # it runs (runtime.tools): a worker that dies between the two never started it.
    tool = ctx.tools.get(call.name)
    started = now if tool is None or tool.replay_safe else None
    execution = ctx.fenced.open_execution(call, ToolStatus.RUNNING, started_at=started,
                                          attempts=1)
    # The caller adds it to ctx.started once committed.
    return Opened(execution, counted=own is not None)


def skip_locked(ctx: TurnContext, call: ToolCallPart, reason: str) -> Message:
    """Give ``call`` a "not executed" result (inside a fenced transaction)."""
    content = not_executed(reason).for_model()
    execution = ctx.fenced.open_execution(call, ToolStatus.CANCELLED, result=content,
                                          completed_at=timezone.now())
    return ctx.fenced.append("tool", [ToolResultPart(call.id, call.name, content, is_error=True)],
                             kind=MessageKind.TOOL_RESULT, tool_execution_id=execution.pk)


def skip(ctx: TurnContext, call: ToolCallPart, reason: str) -> None:
    with ctx.fenced.atomic():
        message = skip_locked(ctx, call, reason)
    ctx.remember(message)
    ctx.emit("tool_call.skipped", id=call.id, name=call.name)


def leave(ctx: TurnContext, ledger: Ledger, terminal: Terminal | None,
          delta: LedgerDelta) -> TurnState:
    """The state ending the batch: ``output`` after a terminal tool, else ``model`` with the
    next iteration reserved (or its denial recorded). Call under the tree lock."""
    if terminal is not None:
        return ctx.state.replace(terminal=terminal, phase=Phase.OUTPUT,
                                 candidate=Candidate(terminal.text, terminal.data))
    reserved, reservation = budget.reserve_next(ledger, budget.own_budget(ctx.row.options,
                                                                          ctx.state))
    delta.add(reserved)
    return ctx.state.replace(phase=Phase.MODEL, reservation=reservation)


@dataclass
class Then:
    """What follows a result in its transaction: the next call's intent or the batch's end.

    ``rest`` are the calls after this one that have no finished execution yet, ``terminal`` the
    terminal record if this call ended the turn, ``executions`` the batch's executions by call.
    """

    rest: list[ToolCallPart]
    terminal: Terminal | None
    executions: dict[str, ToolExecution]
    #: Filled in by :func:`finish`.
    state: TurnState | None = None
    delta: LedgerDelta = field(default_factory=LedgerDelta)
    messages: list[Message] = field(default_factory=list)
    skipped: list[ToolCallPart] = field(default_factory=list)
    error: BudgetExceeded | None = None
    started: str | None = None  # the next call's execution, when its intent was written

    def fresh(self) -> Then:
        """A copy to decide in (a step may be decided twice): nothing filled in yet."""
        return Then(self.rest, self.terminal, dict(self.executions))


def _then(ctx: TurnContext, ledger: Ledger, then: Then) -> None:
    """Inside a result's transaction: start the next call, or end the batch."""
    if any(c.id in then.executions for c in then.rest):
        return  # a resumed batch: the loop handles the calls that have executions
    if then.terminal is not None:
        for call in then.rest:
            reason = completion.skip_reason(ctx, call, then.terminal)
            then.messages.append(skip_locked(ctx, call, reason))
            then.skipped.append(call)
        then.state = leave(ctx, ledger, then.terminal, then.delta)
    elif not then.rest:
        then.state = leave(ctx, ledger, None, then.delta)
    elif not delegates(ctx, then.rest[0]):
        try:
            opened = open_call(ctx, ledger, then.rest[0], then.delta)
        except BudgetExceeded:
            return  # out of time or money: the loop's own start fails the turn
        then.executions[then.rest[0].id] = opened.execution
        if opened.counted:  # written with the result instead of the ledger's change alone
            then.state = ctx.state.counted(then.rest[0].name)
        if opened.denial is not None:
            then.messages.append(opened.denial)
        else:
            then.started = opened.execution.pk
        then.error = opened.error


def delegates(ctx: TurnContext, call: ToolCallPart) -> bool:
    """Whether ``call`` is a background delegation (fanned out and joined: no intent here)."""
    return ctx.background and isinstance(ctx.tools.get(call.name), SubAgentTool)


def finish(ctx: TurnContext, execution: ToolExecution, call: ToolCallPart, status: str,
           content: Any, *, expected: tuple[str, ...], interrupted: bool = False,
           then: Then | None = None) -> BudgetExceeded | None:
    """Record the call's result; with ``then`` also write what follows, in one transaction.

    Returns the budget error that fails the turn once this is committed (the next call's slot
    was refused), if any.
    """
    is_error = status != ToolStatus.COMPLETED
    fields: dict[str, object] = {"completed_at": timezone.now(),
                                 "error" if is_error else "result": content}

    def step(ledger: Ledger) -> tuple[Message, Then | None]:
        if not ctx.fenced.move_execution(execution.pk, expected, status, **fields):
            raise LostClaim(ctx.row.pk, ctx.claim.fence)
        message = ctx.fenced.append(
            "tool", [ToolResultPart(call.id, call.name, content, is_error=is_error)],
            kind=MessageKind.TOOL_RESULT, tool_execution_id=execution.pk,
            metadata={"interrupted": True} if interrupted else None)
        decided = None if then is None else then.fresh()
        if decided is not None:
            _then(ctx, ledger, decided)
            if decided.state is not None:
                ctx.fenced.record(decided.state, delta=decided.delta)
            else:
                ctx.fenced.charge_root(decided.delta)
        return message, decided

    message, decided = ctx.fenced.step(step)
    if then is not None and decided is not None:
        then.executions.update(decided.executions)
        then.state, then.messages, then.skipped = decided.state, decided.messages, decided.skipped
        then.error, then.started = decided.error, decided.started
        if decided.started is not None:
            ctx.started.add(decided.started)
    execution.status = status
    ctx.remember(message)
    if interrupted:
        ctx.emit("tool_call.interrupted", id=call.id, name=call.name,
                 tool_execution_id=execution.pk)
    elif is_error:
        ctx.emit("tool_call.failed", id=call.id, name=call.name, error=content,
                 result_chars=len(render_result(content)))
    else:
        ctx.emit("tool_call.completed", id=call.id, name=call.name,
                 result_chars=len(render_result(content)))
    if then is None:
        return None
    if then.state is not None:
        ctx.state = then.state
    for skipped, written in zip(then.skipped, then.messages, strict=False):
        ctx.remember(written)
        ctx.emit("tool_call.skipped", id=skipped.id, name=skipped.name)
    for written in then.messages[len(then.skipped):]:
        ctx.remember(written)
    return then.error


__all__ = ["Opened", "Then", "delegates", "finish", "leave", "open_call", "skip", "skip_locked"]
