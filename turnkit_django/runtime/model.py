"""The model phase: one model call, and its response committed with what follows it.

The transaction that moves a turn to the model phase (the claim, the end of a tool batch, a
revision request) also checks the tree's time and money and reserves the next iteration,
recording the reservation (or its denial, which fails the turn here with the same
BudgetExceeded) in the state, so this step takes no lock before calling the model, and a resumed
turn never reserves twice. The response's transaction also writes the first tool call's intent
(:mod:`.results`), or publishes the turn when it asked for no tools and the output review has
nothing to run.
"""

from __future__ import annotations

from dataclasses import replace
from decimal import Decimal
from typing import TYPE_CHECKING

from ..agents.prompting import Prompt
from ..base import failpoints
from ..base.serialization import decimal_json
from ..base.states import Phase, TurnStatus
from ..clients import ModelRequest, ModelResponse
from ..conf import turnkit_settings
from ..exceptions import BudgetExceeded
from ..messages import MEDIA_KINDS, ChatMessage, MessageKind, distinct_call_ids
from ..observability import metrics, tracing
from ..store import Candidate, Charge, Ledger, TurnState
from . import budget, completion, dynamic_context, internal, throttling
from .compaction import SUMMARY_KIND, auto_compact, project
from .context import TurnContext
from .deliveries import callback_decision
from .media_projection import project_media
from .output import publish_locked, schema_violations
from .prompts import compose
from .results import Opened, delegates, open_call

if TYPE_CHECKING:
    from ..models import Message


def build_request(ctx: TurnContext, prompt: Prompt | None = None) -> ModelRequest:
    """The turn's next model request, from its visible messages (media described as text) and
    ``prompt`` (composed when not given)."""
    instructions = prompt or compose(ctx.agent, ctx.row, ctx.conversation)
    messages, dynamic = dynamic_context.apply(ctx, instructions, shown(ctx))
    options = ctx.row.options or {}
    return ModelRequest(
        model=ctx.row.model,
        messages=tuple(messages),
        tools=tuple(t.spec() for t in ctx.tools.values()),
        stable_instructions=instructions.stable,
        dynamic_instructions=dynamic,
        output_schema=options.get("output_schema"),
        thinking=options.get("thinking") or None,
        metadata={"turn_id": ctx.row.pk, "conversation_id": ctx.row.conversation_id,
                  "agent": ctx.agent.name, "prompt": instructions.report()},
    )


def shown(ctx: TurnContext) -> list[ChatMessage]:
    """The turn's messages as the model sees them: the newest summary in place of its range,
    media described as text (each projection only when the history has what it replaces)."""
    messages = ctx.visible
    kinds = ctx.history.kinds
    if SUMMARY_KIND in kinds:
        messages = project(messages)
    if not MEDIA_KINDS.isdisjoint(kinds):
        messages = project_media(messages)
    return messages


def model_step(ctx: TurnContext) -> None:
    _reserved(ctx)
    request = build_request(ctx, dynamic_context.record(ctx))
    if auto_compact(ctx, request):  # a summary was paid for: check time and money again
        request = build_request(ctx, dynamic_context.record(ctx))
        with ctx.fenced.atomic() as ledger:
            budget.check_open(ledger)
    ctx.emit("model.requested", model=request.model, tool_names=request.tool_names,
             message_count=len(request.messages))
    failpoints.hit("before_model_call")
    with tracing.model_span(ctx.row.pk, ctx.agent.name, ctx.client.provider, request) as span, \
            metrics.model_call(ctx.agent.name, ctx.row.model), \
            ctx.waiting_for("model", request.model, turnkit_settings.MODEL_TIMEOUT):
        response = throttling.complete(ctx, request)
        span.response(response)
    error = record_response(ctx, response)
    failpoints.hit("after_model_commit")
    if error is not None:
        raise error


def _reserved(ctx: TurnContext) -> None:
    """Raise a stored reservation denial; reserve now if the turn came without one."""
    reservation = ctx.state.reservation
    if reservation is None:
        with ctx.fenced.atomic() as ledger:
            delta, reservation = budget.reserve_next(
                ledger, budget.own_budget(ctx.row.options, ctx.state))
            state = ctx.state.replace(reservation=reservation)
            ctx.fenced.record(state, delta=delta)
        ctx.state = state
    reservation.refuse()


def record_response(ctx: TurnContext, response: ModelResponse) -> BudgetExceeded | None:
    """Commit the response with what follows it; return the error that fails the turn."""
    response = replace(response, parts=distinct_call_ids(response.parts, ctx.history.call_ids))
    calls = response.tool_calls
    # Nothing to review: no policy, and no misfit of the output schema.
    publish = not calls and not ctx.agent.output_policies and not schema_violations(
        ctx, response.output_data, terminal=False)
    state = ctx.state.replace(
        reservation=None,  # used by this response
        iterations=ctx.state.iterations + 1,
        candidate=Candidate(response.text, response.output_data),
        output_metadata=None,  # it described the previous candidate
        phase=Phase.TOOLS if calls else Phase.DONE if publish else Phase.OUTPUT,
    )
    first = calls[0] if calls and not delegates(ctx, calls[0]) else None
    callback: bool | None = None
    if publish:
        failpoints.hit("before_publish")
        callback = callback_decision(ctx.row)  # asked before the lock is taken

    price = internal.price(response, ctx.row.model)

    def step(ledger: Ledger) -> tuple[Message, TurnState, Opened | None, Charge, Decimal | None]:
        fee, delta, cost = internal.charge(ctx, ledger, response, ctx.row.model, price)
        message = ctx.fenced.append(
            "assistant", response.parts,
            kind=MessageKind.TOOL_CALL if calls else MessageKind.TEXT,
            metadata={"model": response.model or ctx.row.model,
                      "usage": response.usage.as_dict(),
                      "cost": decimal_json(cost),
                      "stop_reason": response.stop_reason,
                      "provider": response.provider},
        )
        recorded = state.replace(response_message_id=message.pk,
                                 budget_completion_call_id=completion.choose(ctx, ledger, calls))
        publishing = publish and not ctx.fenced.controls_pending  # a control first
        if publish and not publishing:
            recorded = recorded.replace(phase=Phase.OUTPUT)
        opened = None
        if first is not None:
            try:
                opened = open_call(ctx, ledger, first, delta,
                                   final_save=first.id == recorded.budget_completion_call_id)
            except BudgetExceeded:
                pass  # out of time or money: the tools phase fails the turn
            if opened is not None and opened.counted:  # the turn's own count, with its slot
                recorded = recorded.counted(first.name)
        if publishing:
            publish_locked(ctx, recorded, response.text, response.output_data,
                           callback_allowed=callback, charge=fee, delta=delta)
        else:
            ctx.fenced.record(recorded, charge=fee, delta=delta)
        return message, recorded, opened, fee, cost

    # A background turn's publication hands its lane on in the same transaction, under the
    # tree lock (publish_locked asks for it; the step's writes are still one statement).
    message, ctx.state, opened, fee, cost = ctx.fenced.step(step)
    ctx.row.usage = fee.usage
    ctx.remember(message)
    ctx.batch = {} if calls else None  # its calls have no other executions
    error = None
    if opened is not None:
        ctx.batch = {opened.execution.tool_call_id: opened.execution}
        if opened.denial is not None:
            ctx.remember(opened.denial)
        else:
            ctx.started.add(opened.execution.pk)
        error = opened.error
    metrics.model_usage(ctx.agent.name, ctx.row.model, response.usage.input_tokens,
                        response.usage.output_tokens, cost)
    ctx.emit("model.completed", model=response.model or ctx.row.model,
             tool_call_count=len(calls), usage=response.usage.as_dict(),
             cost=decimal_json(cost))
    if publish and ctx.state.phase == Phase.DONE:
        ctx.emit("turn.completed", status=TurnStatus.COMPLETED, output_text=response.text)
    return error


__all__ = ["build_request", "model_step", "record_response"]
