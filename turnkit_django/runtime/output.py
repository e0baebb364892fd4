"""The output phase: run the output policies on the candidate, then revise, publish or fail.

With violations left and ``output_retries`` not used up, one fenced transaction appends a
revision request and sends the turn back to the model phase, recording the count in the state;
a crash after it resumes at the model phase without a second request. Judge verdicts are stored
in the state with their usage, so a resumed turn never pays twice for one verdict.

Publishing and failing are the turn's terminal writes: status, output or error, the end of the
claim and, for a background turn, its completion callback and the wake of its conversation, all
in one transaction.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Any, Unpack

from ..agents.jsonschema import problems
from ..agents.policies import Audit, Policy, Violation, judge_request, revision_text, verdict
from ..base import failpoints
from ..base.error_records import ErrorRecord
from ..base.serialization import JsonObject, JsonValue
from ..base.states import Phase, TurnStatus
from ..exceptions import LostClaim
from ..messages import TextPart
from ..store import Charge, Ledger, LedgerDelta, TurnState, repair
from ..store.turn_columns import TerminalFields
from . import budget, internal
from .context import ControlPending, TurnContext
from .deliveries import callback_decision, finished, handed_on


@dataclass(frozen=True)
class Outcome:
    """What the output phase does next: revised (loop on), or publish, or fail with ``error``.

    A failed turn keeps the candidate output it was refused for.
    """

    revised: bool = False
    error: ErrorRecord | None = None
    audit: JsonObject | None = None


def output_step(ctx: TurnContext) -> None:
    candidate = ctx.state.candidate
    text = candidate.text if candidate else ""
    data = candidate.data if candidate else None
    outcome = review(ctx, text, data)
    if outcome.revised:
        return
    failpoints.hit("before_publish")
    ended: TerminalFields = {}
    if outcome.error is not None:  # a failed turn keeps the candidate it was refused for
        ended.update({"output_text": text, "output_data": data})
    if outcome.audit is not None:
        ended["audit"] = outcome.audit
    if outcome.error is not None:
        fail(ctx, outcome.error, **ended)
    else:
        publish(ctx, text, data, **ended)


#: The rule (and policy name) of a structured output that does not fit the turn's schema.
OUTPUT_SCHEMA = "output_schema"


def schema_violations(ctx: TurnContext, data: Any, *, terminal: bool) -> list[Violation]:
    """What is wrong with a model's structured output under the turn's ``output_schema``
    (nothing without one). A provider that enforces the schema never sends a misfit; one that
    does not (a local server, a truncated answer) is held to it like an output policy: revised
    within ``output_retries``, then failed (or reported, ``output_policy_mode="report"``). A
    terminal tool's result is the application's own output, not checked."""
    schema = (ctx.row.options or {}).get("output_schema")
    if schema is None or terminal:
        return []
    if data is None:
        return [Violation(OUTPUT_SCHEMA, "no structured output: answer with JSON that matches "
                                         "the output schema", OUTPUT_SCHEMA)]
    return [Violation(OUTPUT_SCHEMA, f"{found['field'] or 'the output'}: {found['problem']}",
                      OUTPUT_SCHEMA) for found in problems(data, schema)[:20]]


def review(ctx: TurnContext, text: str, data: Any) -> Outcome:
    """Run the agent's policies on the candidate; revise, or say how to finish the turn."""
    agent = ctx.agent
    violations = schema_violations(ctx, data, terminal=ctx.state.terminal is not None)
    if not agent.output_policies and not violations:
        return Outcome()
    output = data if data is not None else text
    turn = ctx.handle()
    for index, policy in enumerate(agent.output_policies):
        if policy.judged:
            violations += _judged(ctx, policy, output, str(index))
        else:
            violations += policy.run(output, text, data, turn)
    revisions = ctx.state.revisions
    history = tuple(Audit.from_json(a) for a in ctx.state.audits)
    checked = (OUTPUT_SCHEMA,) if (ctx.row.options or {}).get("output_schema") else ()
    audit = Audit(tuple(violations), (*checked, *(p.name for p in agent.output_policies)),
                  agent.output_policy_mode, revisions, history)
    # After a budget completion no model request is left for a revision: the audit decides.
    if not audit.clean and revisions < agent.output_retries \
            and ctx.state.budget_completion_call_id is None:
        _revise(ctx, audit)
        ctx.emit("output_policy.revision", violation_count=len(audit.violations),
                 attempt=revisions + 1)
        return Outcome(revised=True)
    ctx.emit("output_policy.completed", clean=audit.clean,
             violation_count=len(audit.violations))
    record = audit.as_json()
    if audit.clean or agent.output_policy_mode == "report":
        return Outcome(audit=record)
    rules = "; ".join(f"{v.rule}: {v.message}" for v in audit.violations)
    error = ErrorRecord("OutputPolicyViolation",
                        f"the output violates its output policy ({rules})", {"audit": record})
    return Outcome(error=error, audit=record)


def _judged(ctx: TurnContext, policy: Policy, output: Any, key: str) -> list[Violation]:
    """A judge's verdict on the candidate: stored in the state, or asked and then stored."""
    # Keyed by position: two policy files may share a name.
    stored = ctx.state.judged.get(key)
    if stored is not None:
        return [Violation.from_json(v) for v in stored]
    model = ctx.row.model
    response = internal.call(ctx, judge_request(policy, output, model), "output_policy")
    found = verdict(response, policy.name)
    state = ctx.state.replace(judged={**ctx.state.judged,
                                      key: tuple(v.as_json() for v in found)})
    price = internal.price(response, model)
    with ctx.fenced.atomic() as ledger:
        fee, delta, cost = internal.charge(ctx, ledger, response, model, price)
        ctx.fenced.record(state, charge=fee, delta=delta)
    ctx.state = state
    ctx.row.usage = fee.usage
    internal.completed(ctx, response, model, cost, "output_policy")
    return found


def _revise(ctx: TurnContext, audit: Audit) -> None:
    """Append the revision request and go back to the model phase, in one transaction."""
    agent = ctx.agent
    attempt = audit.revisions + 1
    terminal = ctx.state.terminal
    text = revision_text(audit, agent.output_policies, attempt, agent.output_retries,
                         terminal.tool if terminal else None)
    state = ctx.state.replace(phase=Phase.MODEL, revisions=attempt, candidate=None, terminal=None,
                              judged={}, audits=(*ctx.state.audits, audit.as_json()))
    with ctx.fenced.atomic() as ledger:
        message = ctx.fenced.append(
            "user", [TextPart(text)],
            metadata={"source": "output_policy", "attempt": attempt,
                      "violations": [v.as_json() for v in audit.violations]},
        )
        # The next model call's iteration is reserved here (see the model phase).
        delta, reservation = budget.reserve_next(ledger, budget.own_budget(ctx.row.options,
                                                                           state))
        state = state.replace(reservation=reservation)
        ctx.fenced.record(state, delta=delta)
    ctx.state = state
    ctx.remember(message)
    failpoints.hit("after_revision_commit")


def publish(ctx: TurnContext, text: str, data: JsonValue,
            **extra: Unpack[TerminalFields]) -> None:
    """The terminal write completing the turn with ``text`` and ``data``."""
    state = ctx.state.replace(phase=Phase.DONE)
    callback = callback_decision(ctx.row)  # the policy is asked before the lock is taken

    def step(_ledger: Ledger) -> None:
        # Steering or a pause first: never a stale output. The one statement of a buffered
        # step refuses while a control is pending, and the step is decided again under the
        # lock, which sees it.
        if ctx.fenced.controls_pending:
            raise ControlPending(ctx.row.pk)
        publish_locked(ctx, state, text, data, callback_allowed=callback, **extra)

    ctx.fenced.step(step)
    ctx.state = state
    ctx.emit("turn.completed", status=TurnStatus.COMPLETED, output_text=text)


def publish_locked(ctx: TurnContext, state: TurnState, text: str, data: JsonValue, *,
                   callback_allowed: bool | None, charge: Charge | None = None,
                   delta: LedgerDelta | None = None, **extra: Unpack[TerminalFields]) -> None:
    """:func:`publish` inside an open fenced transaction (with the callback decision taken
    before it); the caller emits the event."""
    ctx.fenced.publish(state, text=text, data=data, charge=charge, delta=delta, **extra)
    if ctx.background:
        row = ctx.row
        locked = partial(finished, row, callback_allowed=callback_allowed, locked=True)
        if (row.options or {}).get("callback_conversation"):
            ctx.fenced.after_writes(locked)  # the callback commits with the terminal write
        else:
            ctx.fenced.hand_off(locked, partial(_handed_on, ctx))


def _handed_on(ctx: TurnContext) -> None:
    failpoints.hit("before_hand_off")
    ctx.waited_for = handed_on(ctx.row)


def fail(ctx: TurnContext, error: ErrorRecord, **extra: Unpack[TerminalFields]) -> None:
    """Finish the turn as failed, closing every open tool call first."""
    state = ctx.state.replace(phase=Phase.DONE)
    record = error.for_turn()
    callback = callback_decision(ctx.row)  # the policy is asked before the lock is taken
    try:
        with ctx.fenced.atomic():
            repair(ctx.row, reason="the turn failed", fence=ctx.claim.fence)
            ctx.fenced.fail(state, error=record, **extra)
            if ctx.background:  # the failure moved the conversation's row: it is locked
                finished(ctx.row, callback_allowed=callback, locked=True)
    except LostClaim:
        return
    ctx.state = state
    ctx.emit("turn.failed", error=record)


__all__ = ["Outcome", "fail", "output_step", "publish", "publish_locked", "review"]
