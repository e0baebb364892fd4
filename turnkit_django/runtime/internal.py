"""Model calls a turn makes besides its own loop steps: policy judges and history summaries.

They are *internal* calls: they reserve no iteration (``max_iterations`` bounds the agent's own
steps), but they check the tree's deadline and spend first, and their usage and cost are added
to the turn and to the root's spend in a fenced transaction, like any model response.
"""

from __future__ import annotations

from decimal import Decimal

from ..clients import ModelRequest, ModelResponse, Usage
from ..clients.cost import compute_cost
from ..conf import turnkit_settings
from ..store import Charge, Ledger, LedgerDelta
from . import budget
from .context import TurnContext


def call(ctx: TurnContext, request: ModelRequest, purpose: str) -> ModelResponse:
    """Check the tree's budget, then call the model (no transaction open)."""
    with ctx.fenced.atomic() as ledger:
        budget.check_open(ledger)
    ctx.emit("model.requested", model=request.model, purpose=purpose, tool_names=[],
             message_count=len(request.messages))
    with ctx.waiting_for("model", request.model, turnkit_settings.MODEL_TIMEOUT):
        return ctx.client.complete(request)


def charge(ctx: TurnContext, ledger: Ledger, response: ModelResponse,
           model: str) -> tuple[Charge, LedgerDelta, Decimal | None]:
    """What ``response`` costs the turn and its tree; call inside a fenced step.

    The caller sets ``ctx.row.usage`` to the charge's usage once the step committed (a step
    may be decided twice, see :meth:`~turnkit_django.store.Fenced.step`).
    """
    cost = compute_cost(response.model or model, response.usage, response.reported_cost)
    usage = (Usage.from_dict(ctx.row.usage) + response.usage).as_dict()
    return Charge(usage, cost), budget.spent(ledger, cost), cost


def completed(ctx: TurnContext, response: ModelResponse, model: str, cost: Decimal | None,
              purpose: str) -> None:
    """Emit ``model.completed`` for an internal call that was recorded."""
    ctx.emit("model.completed", model=response.model or model, purpose=purpose,
             tool_call_count=0, usage=response.usage.as_dict(),
             cost=None if cost is None else str(cost))


__all__ = ["call", "charge", "completed"]
