"""Model calls a turn makes besides its own loop steps: policy judges and history summaries.

They are *internal* calls: they reserve no iteration (``max_iterations`` bounds the agent's own
steps), but they check the tree's deadline and spend first, and their usage and cost are added
to the turn and to the root's spend in a fenced transaction, like any model response.
"""

from __future__ import annotations

from decimal import Decimal

from ..base.serialization import decimal_json
from ..clients import ModelRequest, ModelResponse, Usage
from ..clients.accounting import add_call
from ..clients.cost import response_cost
from ..conf import turnkit_settings
from ..store import Charge, Ledger, LedgerDelta
from . import budget, throttling
from .context import TurnContext


def call(ctx: TurnContext, request: ModelRequest, purpose: str) -> ModelResponse:
    """Check the tree's budget, then call the model (no transaction open)."""
    with ctx.fenced.atomic() as ledger:
        budget.check_open(ledger)
    ctx.emit("model.requested", model=request.model, purpose=purpose, tool_names=[],
             message_count=len(request.messages))
    with ctx.waiting_for("model", request.model, turnkit_settings.MODEL_TIMEOUT):
        return throttling.complete(ctx, request)


def price(response: ModelResponse, model: str) -> Decimal | None:
    """What ``response`` costs (None: unknown); asked before the step that charges it, since
    a project's ``COST_CALCULATOR`` is its code and runs outside any transaction."""
    used = response.model or model
    return response_cost(used, response)


def charge(ctx: TurnContext, ledger: Ledger, response: ModelResponse, model: str,
           cost: Decimal | None) -> tuple[Charge, LedgerDelta, Decimal | None]:
    """Charge ``response`` (its :func:`price` ``cost``) to the turn and its tree; call in a
    fenced step. The caller sets ``ctx.row.usage`` to the charge's usage (totals and the
    per-model breakdown) once the step committed (a step may be decided twice, see
    :meth:`~turnkit_django.store.Fenced.step`)."""
    return charge_usage(ctx, ledger, response.usage, response.model or model, cost)


def charge_usage(ctx: TurnContext, ledger: Ledger, usage: Usage, model: str,
                 cost: Decimal | None) -> tuple[Charge, LedgerDelta, Decimal | None]:
    """:func:`charge` for a call that is not a model response (None: its cost is unknown);
    the caller sets ``ctx.row.usage`` to the charge's usage once committed."""
    delta, cost = budget.spent(ledger, cost)  # None: too large to record
    record = add_call(ctx.row.usage, usage, model, cost)
    return Charge(record, cost), delta, cost


def completed(ctx: TurnContext, response: ModelResponse, model: str, cost: Decimal | None,
              purpose: str) -> None:
    """Emit ``model.completed`` for an internal call that was recorded."""
    ctx.emit("model.completed", model=response.model or model, purpose=purpose,
             tool_call_count=0, usage=response.usage.as_dict(),
             cost=decimal_json(cost))


__all__ = ["call", "charge", "charge_usage", "completed", "price"]
