"""Steering after a tool made an image: the calls not started are still superseded.

An image a tool makes during a batch is stored as an assistant message (kind ``image``), after
the response whose calls are running. The steering boundary must find the calls of the
response, not of that image, or the calls it should supersede stay open: an execution left
``running`` on a finished turn and a tool call with no result.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnkit_django import Agent, ImageTool, ToolContext, tool
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.services import controls
from turnkit_django.testing import FunctionClient, FunctionMediaClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("media_root")]

looked_up: list[str] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    looked_up.clear()


class Banner(ImageTool):
    """Draw a banner; the user steers the turn while it paints."""

    client = FunctionMediaClient()

    def prompt(self, ctx: ToolContext, args: Any) -> str:
        controls.steer(Turn.objects.get(pk=ctx.turn.id), "Prefer blue.", key="steer-1")
        return args.prompt


@tool
def lookup(order_id: str) -> dict:
    """Look up an order."""
    looked_up.append(order_id)
    return {"order_id": order_id}


def test_a_call_after_an_image_tool_is_superseded_by_steering(registered, valid_transcript):
    seen: list[str] = []

    def respond(request: Any) -> Any:
        if not any(m.role == "tool" for m in request.messages):
            return [call("banner", prompt="snow"), call("lookup", order_id="2")]
        seen.append([m.text for m in request.messages if m.role == "user"][-1])
        return reply("done")

    agent = registered(Agent("painter", tools=[Banner(), lookup],
                             client=FunctionClient(respond)))
    run = agent.run("Draw and look up")

    assert run.status == "completed", run.error
    assert looked_up == [] and seen == ["Prefer blue."]
    skipped = ToolExecution.objects.get(turn_id=run.id, tool_name="lookup")
    assert skipped.status == "cancelled"
    assert skipped.result["error"] == "superseded"
    valid_transcript(run.conversation_id)
