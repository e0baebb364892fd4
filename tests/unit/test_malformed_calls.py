"""A client of the application's own (the ``Client`` protocol) may build tool calls the shipped
clients never do: arguments that are no JSON object, raw arguments that are no text, an id or a
name that is no string. Each becomes a call the model reads an error for, and the turn goes on;
they raised a pydantic ValidationError, an IntegrityError or a TypeError out of ``agent.run``."""

from __future__ import annotations

from typing import Any

import pytest

from turnkit_django import Agent, tool
from turnkit_django.clients.protocol import ModelResponse, Usage
from turnkit_django.messages import ToolCallPart
from turnkit_django.models import ToolExecution
from turnkit_django.testing import ScriptedClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]
ran: list[str] = []


@tool
def lookup(order_id: str) -> dict:
    """Look an order up."""
    ran.append(order_id)
    return {"order_id": order_id}


def _response(part: ToolCallPart) -> ModelResponse:
    return ModelResponse((part,), Usage(1, 1), "m", "tool_use", "custom")


@pytest.mark.parametrize("part", [
    ToolCallPart("c1", "lookup", [1, 2]),  # type: ignore[arg-type]
    ToolCallPart("c1", "lookup", "order 42"),  # type: ignore[arg-type]
    ToolCallPart("c1", "lookup", None),  # type: ignore[arg-type]
    ToolCallPart("c1", "lookup", 5),  # type: ignore[arg-type]
    ToolCallPart("c1", "lookup", {}, raw_arguments=5),  # type: ignore[arg-type]
    ToolCallPart(None, "lookup", {"order_id": "42"}),  # type: ignore[arg-type]
    ToolCallPart("c1", None, {"order_id": "42"}),  # type: ignore[arg-type]
    ToolCallPart(7, 8, {"order_id": "42"}),  # type: ignore[arg-type]
], ids=["list", "str", "none", "int", "raw-int", "id-none", "name-none", "id-name-int"])
def test_a_malformed_call_of_a_custom_client_is_a_result_the_model_reads(part: Any):
    ran.clear()
    agent = Agent("custom_calls", tools=[lookup], client=ScriptedClient(
        [_response(part), reply("sorry", usage={"input_tokens": 1, "output_tokens": 1})]))
    run = agent.run("go")
    assert run.status == "completed", run.error
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert isinstance(execution.tool_call_id, str) and execution.tool_call_id
    if isinstance(part.arguments, dict) and part.raw_arguments is None and part.name == "lookup":
        assert ran == ["42"]  # only the id was wrong: a fresh one, and the call ran
    else:
        assert ran == [] and execution.status == "failed"
