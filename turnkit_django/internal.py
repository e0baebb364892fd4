"""Model calls a turn makes besides its own loop steps: policy judges and history summaries.

They are *internal* calls: they reserve no iteration (``max_iterations`` bounds the agent's own
steps), but they check the tree's deadline and spend first, and their usage and cost are added
to the turn and to the root's spend in a fenced transaction, like any model response.
"""

from __future__ import annotations

from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db.models import F
from django.utils import timezone

from . import budget
from .clients.base import ModelRequest, ModelResponse, Usage
from .cost import compute_cost

if TYPE_CHECKING:
    from .runtime import Execution


def call(ex: Execution, request: ModelRequest, purpose: str) -> ModelResponse:
    """Check the tree's budget, then call the model (no transaction open)."""
    with ex.fenced.atomic() as ledger:
        budget.check_open(ledger, timezone.now())
    ex.emit("model.requested", model=request.model, purpose=purpose, tool_names=[],
            message_count=len(request.messages))
    return ex.client.complete(request)


def charge(ex: Execution, response: ModelResponse, model: str) -> tuple[dict[str, Any],
                                                                      Decimal | None]:
    """Return turn fields adding ``response``'s usage and cost; charge the root's spend.

    Call inside ``ex.fenced.atomic()`` and write the fields with ``ex.fenced.update_turn``;
    the in-memory row's usage is updated at once (a failed write ends the execution anyway).
    """
    cost = compute_cost(response.model or model, response.usage, response.reported_cost)
    usage = (Usage.from_dict(ex.row.usage) + response.usage).as_dict()
    ex.row.usage = usage
    fields: dict[str, Any] = {"usage": usage}
    if cost is None:
        fields["cost_unknown"] = True
    else:
        fields["cost"] = F("cost") + cost
    if cost:
        if ex.claim.is_root:
            fields["tree_spend"] = F("tree_spend") + cost
        else:
            ex.fenced.update_root(tree_spend=F("tree_spend") + cost)
    return fields, cost


def completed(ex: Execution, response: ModelResponse, model: str, cost: Decimal | None,
              purpose: str) -> None:
    """Emit ``model.completed`` for an internal call that was recorded."""
    ex.emit("model.completed", model=response.model or model, purpose=purpose,
            tool_call_count=0, usage=response.usage.as_dict(),
            cost=None if cost is None else str(cost))


__all__ = ["call", "charge", "completed"]
