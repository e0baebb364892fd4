"""A scripted model for the example: every answer is computed from the request's transcript.

Because nothing is kept between calls, a Celery worker that takes over a turn after a crash gets
exactly the answer the dead worker would have got. Tool call ids are derived from the transcript
length, so they are unique within a turn in every process.
"""

from __future__ import annotations

import re
from typing import Any

from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.messages import ToolResultPart
from turnkit_django.testing import Entry, FunctionClient, call, reply

_ORDER = re.compile(r"order\s+#?(\w+)", re.IGNORECASE)
_AMOUNT = re.compile(r"\$(\d+(?:\.\d\d)?)")


class ScriptedSupportModel(FunctionClient):
    """The "support" and "writer" agents' model, without a network."""

    def __init__(self) -> None:
        super().__init__(respond)


def respond(request: ModelRequest) -> Entry:
    """Return the next response for ``request``."""
    if request.metadata.get("agent") == "writer":
        return reply(_draft_note(_first_user_text(request)))
    if request.metadata.get("agent") == "studio":
        if request.last_message_is_user():
            return call("paint_image", id=f"call_{len(request.messages)}",
                        prompt=f"Product photo: {_first_user_text(request)}")
        return reply("The studio could not make that picture: you have no image credits left.")
    call_id = f"call_{len(request.messages)}"
    if request.last_message_is_user():
        match = _ORDER.search(_first_user_text(request))
        if match is None:
            return reply("Which order is this about? Please give me the order number.",
                         chunks=10, delay=0.04)  # streamed to an on_delta= listener
        return call("lookup_order", id=call_id, order_id=match.group(1))
    results = _tool_results(request)
    order = results.get("lookup_order")
    if not isinstance(order, dict) or "total_cents" not in order:
        return reply("I could not find that order, so I did not refund anything.")
    amount = f"${order['total_cents'] / 100:.2f}"
    if "writer" not in results:
        return call("writer", id=call_id, task=(
            f"Write to {order['customer']} about order {order['order_id']} (a {order['item']}) "
            f"that arrived damaged: apologise and say a refund of {amount} is on its way."
        ))
    note = (results["writer"] or {}).get("output_text", "")
    return call("issue_refund", id=call_id, order_id=order["order_id"],
                amount_cents=order["total_cents"], note=note)


def _first_user_text(request: ModelRequest) -> str:
    return next((m.text for m in request.messages if m.role == "user"), "")


def _tool_results(request: ModelRequest) -> dict[str, Any]:
    """The latest successful result of each tool, by tool name."""
    results: dict[str, Any] = {}
    for message in request.messages:
        for part in message.parts:
            if isinstance(part, ToolResultPart) and not part.is_error:
                results[part.name] = part.content
    return results


def _draft_note(task: str) -> str:
    order = _ORDER.search(task)
    amount = _AMOUNT.search(task)
    about = f"order {order.group(1)}" if order else "your order"
    refund = f"${amount.group(1)}" if amount else "the full amount"
    return (f"We are sorry that {about} arrived damaged. A refund of {refund} is on its way "
            "to your card and should appear within five business days.")
