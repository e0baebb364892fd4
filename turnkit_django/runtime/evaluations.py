"""Structured evaluations from a running turn: fenced attempts, receipts, reuse and retries.

``turn.internal_evaluation(...)`` is called from a tool or an output policy of the running turn
(through ``ctx.turn`` or the policy's ``turn``): it needs the turn's claim, because every write
is fenced. One evaluation:

1. its arguments are checked locally; bad input raises before anything is written;
2. its receipt id is the SHA-256 of its identity: the evaluator's identity, the model, the
   purpose, the policy version, the candidate, the questions, the turn's current candidate
   output, the timeout and the attempt cap. A *completed* receipt with that id in the turn's
   state is returned as it is: no request, no charge (so a replayed tool or a resumed output
   review never pays twice);
3. before each dispatch the authorization policy is asked for ``evaluate``; then one fenced
   transaction (tree lock) checks the deadline and the spend, marks an attempt an earlier
   worker left unfinished as ``interrupted`` (its cost is unknown: it may have been billed),
   checks the attempt cap against the persisted attempts, and persists the new attempt as
   ``uncertain``, all before any network I/O;
4. the evaluator makes one request, with no transaction open and no lock held;
5. one fenced transaction records the outcome with its usage and cost, charged to the turn and
   the root's spend (a malformed answer keeps the usage it reported; an uncertain one makes the
   cost unknown);
6. a retryable failure is tried again while attempts are left (``max_attempts`` 1 to 3,
   default 1) and the deadline allows, after the provider's ``Retry-After`` or an exponential
   backoff with full jitter.

A revoked claim (cancel, reconcile) raises :class:`~turnkit_django.exceptions.LostClaim` at the
next write, so a late answer is never recorded.
"""

from __future__ import annotations

import hashlib
import logging
import secrets
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from ..base.serialization import (
    JsonMapping,
    JsonObject,
    JsonValue,
    canonical,
    decimal_json,
    decimal_text,
    json_value,
)
from ..clients import Usage
from ..clients.cost import compute_cost
from ..clients.evaluation import (
    Answer,
    Evaluation,
    EvaluationRequest,
    Evaluator,
    EvaluatorReply,
    Question,
    check_questions,
    parse_answers,
)
from ..conf import MAX_SECONDS
from ..exceptions import AuthorizationError, EvaluationError
from ..store import Charge, LedgerDelta
from . import budget, internal
from .authorization import is_allowed
from .context import TurnContext

logger = logging.getLogger("turnkit_django.evaluations")

CURRENT: object = object()  # the default candidate: the turn's current candidate output
MAX_ATTEMPTS = 3
BACKOFF, MAX_BACKOFF = 0.5, 8.0
_random = secrets.SystemRandom()


@dataclass(frozen=True)
class Spec:
    evaluator: Evaluator
    model: str
    purpose: str
    questions: tuple[Question, ...]
    policy_version: str
    candidate: JsonValue
    max_attempts: int
    timeout: float


def _spec(ctx: TurnContext, *, evaluator: object, model: object, purpose: object,
          questions: object, policy_version: object, candidate: object, max_attempts: object,
          timeout: object) -> Spec:
    """Check the arguments; raise TypeError or ValueError saying what to pass."""
    if not isinstance(evaluator, Evaluator) or not isinstance(evaluator.identity, str):
        raise TypeError(f"evaluator must be an Evaluator (an object with an `identity` string "
                        f"and evaluate(request)), such as OpenAIEvaluator(...); got {evaluator!r}")
    if not isinstance(policy_version, str):
        raise TypeError(f"policy_version must be a string, got {policy_version!r}")
    if isinstance(max_attempts, bool) or not isinstance(max_attempts, int) \
            or not 1 <= max_attempts <= MAX_ATTEMPTS:
        raise ValueError(f"max_attempts must be 1, 2 or 3, got {max_attempts!r}")
    # Bounded like the seconds settings: inf and nan (no comparison holds) set no deadline.
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
            or not 0 < timeout <= MAX_SECONDS:
        raise ValueError(f"timeout must be a finite positive number of seconds, at most ten "
                         f"years (such as 30, the default), got {repr(timeout)[:40]}")
    if candidate is CURRENT:
        current = ctx.state.candidate
        candidate = None if current is None else (
            current.data if current.data is not None else current.text)
    return Spec(evaluator, _text("model", model), _text("purpose", purpose),
                check_questions(questions), policy_version,
                json_value(candidate, "candidate"), max_attempts, float(timeout))


def _text(name: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise ValueError(f"{name} must be a non-empty string, got {value!r}")
    return value


def receipt_id(ctx: TurnContext, spec: Spec) -> str:
    """The id of an evaluation's receipt: a digest of everything that decides its answer."""
    current = ctx.state.candidate
    identity = {
        "evaluator": spec.evaluator.identity, "model": spec.model, "purpose": spec.purpose,
        "policy_version": spec.policy_version, "candidate": spec.candidate,
        "questions": [q.as_json() for q in spec.questions],
        "current": None if current is None else [current.text, current.data],
        "timeout": spec.timeout, "max_attempts": spec.max_attempts,
    }
    return "evr_" + hashlib.sha256(canonical(identity).encode()).hexdigest()


def evaluate(ctx: TurnContext, **arguments: object) -> Evaluation:
    """Run a structured evaluation for the claimed turn (see the module docstring)."""
    spec = _spec(ctx, **arguments)
    rid = receipt_id(ctx, spec)
    stored = ctx.state.evaluations.get(rid)
    if stored is not None and stored.get("status") == "completed":
        return Evaluation.from_receipt(stored, reused=True)
    while True:
        if not is_allowed("evaluate", principal=ctx.principal, turn_id=ctx.row.pk,
                          conversation_id=ctx.row.conversation_id,
                          evaluator=spec.evaluator.identity, model=spec.model,
                          purpose=spec.purpose, turn_principal=ctx.principal):
            raise AuthorizationError("evaluate", f"not authorized: evaluate ({spec.purpose!r} "
                                                 f"with {spec.model!r})")
        number, deadline = _begin(ctx, rid, spec)
        ctx.emit("evaluation.requested", receipt_id=rid, attempt=number, model=spec.model,
                 purpose=spec.purpose, question_count=len(spec.questions))
        started = time.monotonic()
        outcome = _dispatch(spec, EvaluationRequest(
            spec.model, spec.purpose, spec.questions, spec.candidate, spec.policy_version,
            spec.timeout, {"receipt_id": rid, "attempt": number, "turn_id": ctx.row.pk}))
        took = int((time.monotonic() - started) * 1000)
        if not isinstance(outcome, EvaluationError):
            reply, answers = outcome
            evaluation = _succeeded(ctx, rid, number, spec, reply, answers, took)
            ctx.emit("evaluation.completed", receipt_id=rid, attempt=number,
                     model=evaluation.model, purpose=spec.purpose, status="completed",
                     http_status=reply.http_status, usage=reply.usage.as_dict(),
                     cost=decimal_json(evaluation.cost),
                     duration_ms=took)
            return evaluation
        now = _failed(ctx, rid, number, spec, outcome, took)
        ctx.emit("evaluation.failed", receipt_id=rid, attempt=number, model=spec.model,
                 purpose=spec.purpose, status=outcome.status, http_status=outcome.http_status,
                 error=str(outcome), duration_ms=took)
        delay = _retry_delay(outcome, number, spec, deadline, now)
        if delay is None:
            raise outcome
        getattr(spec.evaluator, "sleep", time.sleep)(delay)


def _dispatch(spec: Spec, request: EvaluationRequest) -> (
        tuple[EvaluatorReply, dict[str, Answer]] | EvaluationError):
    """One request (no transaction open): its reply and answers, or the error it ended in."""
    try:
        reply = spec.evaluator.evaluate(request)
    except EvaluationError as exc:
        return exc
    except Exception as exc:
        logger.exception("evaluator %r raised", spec.evaluator.identity)
        return EvaluationError(f"the evaluator raised {type(exc).__name__}; the request may "
                               "have been carried out", status="uncertain")
    try:
        return reply, parse_answers(spec.questions, reply.answers)
    except (TypeError, ValueError) as exc:
        return EvaluationError(f"the evaluation's answers are malformed: {exc}",
                               status="malformed",
                               usage=reply.usage if reply.usage_reported else None,
                               model=reply.model, http_status=reply.http_status,
                               reported_cost=reply.reported_cost)


# --------------------------------------------------------------------------- receipts


def _new_receipt(rid: str, spec: Spec) -> JsonObject:
    return {"id": rid, "purpose": spec.purpose, "model": spec.model,
            "evaluator": spec.evaluator.identity, "policy_version": spec.policy_version,
            "question_count": len(spec.questions), "max_attempts": spec.max_attempts,
            "status": "in_progress", "attempts": [], "usage": dict(Usage().as_dict()), "cost": "0"}


def _attempts(receipt: JsonMapping) -> list[JsonObject]:
    """A copy of the receipt's attempts, each its own dict (to update)."""
    stored = receipt.get("attempts")
    return [dict(a) for a in stored if isinstance(a, dict)] if isinstance(stored, list) else []


def _add(receipt: JsonObject, usage: Usage, cost: Decimal | None) -> None:
    """Add an attempt's usage and cost to the receipt's totals (None: unknown from now on)."""
    receipt["usage"] = dict((Usage.from_dict(receipt.get("usage")) + usage).as_dict())
    known = receipt.get("cost")
    receipt["cost"] = (None if not isinstance(known, str) or cost is None
                       else decimal_text(Decimal(known) + cost))


def _write(ctx: TurnContext, rid: str, receipt: JsonObject, charge: Charge | None,
           delta: LedgerDelta | None) -> None:
    state = ctx.state.replace(evaluations={**ctx.state.evaluations, rid: receipt})
    ctx.fenced.record(state, charge=charge, delta=delta)
    ctx.state = state  # the transaction commits, or the claim is lost and the turn stops


def _begin(ctx: TurnContext, rid: str, spec: Spec) -> tuple[int, datetime | None]:
    """Persist the next attempt as uncertain (or refuse it); return its number and the tree's
    deadline."""
    refusal: EvaluationError | None = None
    with ctx.fenced.atomic() as ledger:
        budget.check_open(ledger)
        now = ledger.now.isoformat()  # the database clock
        receipt = dict(ctx.state.evaluations.get(rid) or _new_receipt(rid, spec))
        attempts = _attempts(receipt)
        charge = delta = None
        for attempt in attempts:
            if attempt["status"] == "uncertain" and "finished_at" not in attempt:
                attempt.update(status="interrupted", finished_at=now, cost=None)
                _add(receipt, Usage(), None)
                charge, delta, _ = internal.charge_usage(ctx, ledger, Usage(), spec.model, None)
                ctx.row.usage = charge.usage  # an atomic block: a failed write ends the turn
        if len(attempts) >= spec.max_attempts:
            last = str(attempts[-1].get("status")) if attempts else "unavailable"
            refusal = EvaluationError(
                f"evaluation {spec.purpose!r} used its {spec.max_attempts} attempt(s); the last "
                f"one is {last}, and an attempt is never replayed", status=last)
            receipt.update(status="failed", attempts=list[JsonValue](attempts))
        else:
            attempts.append({"n": len(attempts) + 1, "status": "uncertain",
                             "started_at": now})
            receipt.update(status="in_progress", attempts=list[JsonValue](attempts))
        _write(ctx, rid, receipt, charge, delta)
        deadline = ledger.deadline_at
    if refusal is not None:
        raise refusal
    return len(attempts), deadline


def _finish(ctx: TurnContext, rid: str, number: int, outcome: JsonObject, usage: Usage,
            model: str, cost: Decimal | None, charged: bool, **receipt: JsonValue) -> datetime:
    """Record attempt ``number``'s outcome (charging it when ``charged``); return the database
    clock's time."""
    with ctx.fenced.atomic() as ledger:
        charge = delta = None
        if charged:
            charge, delta, cost = internal.charge_usage(ctx, ledger, usage, model, cost)
            ctx.row.usage = charge.usage  # an atomic block: a failed write ends the turn
        current = dict(ctx.state.evaluations[rid])
        attempts = _attempts(current)
        attempts[number - 1].update(outcome, finished_at=ledger.now.isoformat(),
                                    usage=dict(usage.as_dict()),
                                    cost=decimal_json(cost))
        current.update(receipt, attempts=list[JsonValue](attempts))
        _add(current, usage, cost)
        _write(ctx, rid, current, charge, delta)
        return ledger.now


def _succeeded(ctx: TurnContext, rid: str, number: int, spec: Spec, reply: EvaluatorReply,
               answers: dict[str, Answer], took: int) -> Evaluation:
    model = reply.model or spec.model
    cost = None if not reply.usage_reported and reply.reported_cost is None else compute_cost(
        model, reply.usage, reply.reported_cost)
    _finish(ctx, rid, number, {"status": "completed", "model": model,
                               "http_status": reply.http_status, "duration_ms": took},
            reply.usage, model, cost, True, status="completed",
            result={"model": model, "answers": {k: a.as_json() for k, a in answers.items()}})
    return Evaluation.from_receipt(ctx.state.evaluations[rid], reused=False)


def _failed(ctx: TurnContext, rid: str, number: int, spec: Spec, error: EvaluationError,
            took: int) -> datetime:
    """Record a failed attempt: not taken (no charge), or its usage with a cost that is known
    only when the provider reported usage for it. Returns the database clock's time."""
    usage = error.usage if isinstance(error.usage, Usage) else Usage()
    model = error.model or spec.model
    charged = error.status != "unavailable"
    cost = compute_cost(model, usage, error.reported_cost) if error.usage is not None \
        or error.reported_cost is not None else None
    return _finish(ctx, rid, number, {"status": error.status, "model": model,
                                      "http_status": error.http_status, "error": str(error),
                                      "duration_ms": took},
                   usage, model, cost if charged else Decimal(0), charged,
                   status="in_progress" if number < spec.max_attempts else "failed")


def _retry_delay(error: EvaluationError, number: int, spec: Spec, deadline: datetime | None,
                 now: datetime) -> float | None:
    """Seconds to wait before the next attempt, or None when it must not be made."""
    if not error.retryable or number >= spec.max_attempts:
        return None
    delay = error.retry_after if error.retry_after is not None else _random.uniform(
        0, min(MAX_BACKOFF, BACKOFF * 2 ** (number - 1)))
    if deadline is not None and now + timedelta(seconds=delay) >= deadline:
        return None
    return delay


# --------------------------------------------------------------------------- output metadata


def set_output_metadata(ctx: TurnContext, value: object) -> None:
    """Store assessment metadata for the turn's current candidate (a fenced write); the next
    model response resets it, and a child's result envelope carries it."""
    value = json_value(value, "output_metadata")
    if value is not None and not isinstance(value, dict):
        raise TypeError(f"output_metadata must be a dict (or None), got {value!r}")
    state = ctx.state.replace(output_metadata=value)
    with ctx.fenced.atomic():
        ctx.fenced.record(state)
    ctx.state = state


__all__ = ["CURRENT", "evaluate", "receipt_id", "set_output_metadata"]
