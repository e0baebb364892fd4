"""The example's agents: "support" looks orders up, asks "writer" for a note, and refunds.

This module is imported at startup in every process (web, worker, beat) by turnkit's app config,
so every process registers the same agents and a worker can rebuild any turn by agent name.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from turnkit_django import Agent, Skill, ToolContext, ToolError, register, tool

from . import payments, studio  # noqa: F401 -- studio registers the painter specialist

EXAMPLE = Path(__file__).resolve().parent.parent

ORDERS: dict[str, dict[str, Any]] = {
    "42": {"order_id": "42", "customer": "Ada", "item": "ceramic teapot",
           "status": "delivered", "total_cents": 4599},
    "77": {"order_id": "77", "customer": "Grace", "item": "walnut desk lamp",
           "status": "shipped", "total_cents": 8900},
}


@tool
def lookup_order(order_id: str) -> dict[str, Any]:
    """Look up an order by id: customer, item, status and total in cents."""
    order = ORDERS.get(order_id)
    if order is None:
        raise ToolError(f"there is no order {order_id!r}")
    return order


def _refund_message(result: dict[str, Any]) -> str:
    amount = result["amount_cents"] / 100
    return f"Refunded ${amount:.2f} for order {result['order_id']} ({result['refund']})."


@tool(terminal=_refund_message, recovery="replay_safe")
def issue_refund(ctx: ToolContext, order_id: str, amount_cents: int, note: str = "") -> dict:
    """Refund an order to the customer's card and end the conversation turn."""
    # Replay-safe because the provider deduplicates by the key: after a crash the call may run
    # again with the same key and returns the first refund instead of paying twice.
    return payments.refund(
        order_id, amount_cents, idempotency_key=ctx.idempotency_key, note=note,
        latency=float(ctx.context.get("provider_latency", 0)),
    )


def short_and_calm(output: Any) -> dict[str, str] | None:
    """Output policy: a customer note has at most three sentences and no exclamation marks."""
    text = str(output)
    if "!" in text:
        return {"rule": "no_exclamation", "message": "contains an exclamation mark"}
    if len([s for s in re.split(r"[.?]\s", text) if s.strip()]) > 3:
        return {"rule": "three_sentences", "message": "is longer than three sentences"}
    return None


writer = Agent(
    "writer",
    description="Drafts short customer-facing messages.",
    instructions="Write two warm, plain sentences. No greeting line, no signature.",
    output_policy=[short_and_calm],
    output_retries=1,
)

support = register(Agent(
    "support",
    description="Resolves order problems for customers.",
    instructions="Look the order up, have the writer draft a note for the customer, then refund.",
    tools=[lookup_order, issue_refund],
    sub_agents=[writer],
    # Always in the prompt: the team's refund rules, kept as markdown next to the code.
    skills=[Skill.from_file(EXAMPLE / "skills" / "refunds.md")],
    max_iterations=8,
    max_tool_executions=10,
))
