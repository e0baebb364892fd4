"""A response without usage has an unknown cost, never a made-up zero.

The providers' clients read token counts from the response's ``usage``. A gateway (or a mock,
as in docs/providers.md) that leaves it out used to give ``Usage()``, zero tokens, which the
rates priced at ``Decimal('0E-8')``: a run that cost money read as free.
"""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.unit.fixtures.wire import Wire, allow_network, anthropic_httpx, payloads
from turnkit_django import Agent, tool
from turnkit_django.clients import AnthropicClient, ModelRequest, OpenAIClient
from turnkit_django.clients.cost import response_cost
from turnkit_django.clients.protocol import ModelResponse, Usage
from turnkit_django.console.formatting import format_cost
from turnkit_django.messages import ChatMessage, TextPart

pytestmark = pytest.mark.django_db

MODEL = "gpt-5.4-mini"  # in the built-in rate table
ANSWER = {"choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}]}


@pytest.fixture(autouse=True)
def _network() -> Iterator[None]:
    with allow_network():
        yield


def openai(*bodies: dict[str, Any]) -> OpenAIClient:
    replies = iter(bodies)
    return OpenAIClient(MODEL, api_key="test", sleep=lambda s: None, transport=httpx.MockTransport(
        lambda request: httpx.Response(200, json=next(replies))))


def test_an_openai_response_without_usage_has_an_unknown_cost() -> None:
    run = Agent("no_usage", model=MODEL, instructions="x", client=openai(ANSWER)).run("hello")
    assert run.status == "completed" and run.output_text == "hi"
    assert run.cost is None
    assert run.cost_breakdown().cost is None


def test_an_openai_response_with_usage_is_priced() -> None:
    body = {**ANSWER, "usage": {"prompt_tokens": 100, "completion_tokens": 10}}
    run = Agent("with_usage", model=MODEL, instructions="x", client=openai(body)).run("hello")
    assert run.cost == Decimal("0.00012")  # 100 x 0.75 + 10 x 4.50 per million


def test_one_response_without_usage_makes_the_run_cost_unknown() -> None:
    """One unpriced call anywhere makes the cost unknown (docs/providers.md)."""
    @tool
    def add(a: int, b: int) -> int:
        """Add two ints."""
        return a + b

    first = {"choices": [{"message": {"content": None, "tool_calls": [
        {"id": "c1", "type": "function",
         "function": {"name": "add", "arguments": '{"a": 2, "b": 3}'}}]},
        "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 100, "completion_tokens": 10}}
    run = Agent("half_usage", model=MODEL, instructions="Use add.", tools=[add],
                client=openai(first, {"choices": [{"message": {"content": "5"},
                                                   "finish_reason": "stop"}]})).run("2+3?")
    assert run.status == "completed"
    assert run.cost is None
    assert run.cost_breakdown().known_cost == Decimal("0.00012")


def test_openai_reports_whether_usage_came_with_the_response() -> None:
    client = openai(ANSWER, {**ANSWER, "usage": {"prompt_tokens": 1, "completion_tokens": 1}})
    request = ModelRequest(model=MODEL, messages=(ChatMessage("user", (TextPart("x"),)),))
    assert client.complete(request).usage_reported is False
    assert client.complete(request).usage_reported is True


def test_an_anthropic_response_without_usage_has_an_unknown_cost() -> None:
    body = payloads("anthropic")["text"]
    del body["usage"]
    wire = Wire(anthropic_httpx(), (200, body), (200, payloads("anthropic")["text"]))
    client = AnthropicClient(http_client=wire.client(), api_key="sk-ant-api03-unit-test-key")
    request = ModelRequest(model="claude-sonnet-5-5",
                           messages=(ChatMessage("user", (TextPart("x"),)),))
    missing, present = client.complete(request), client.complete(request)
    assert missing.usage_reported is False and response_cost("claude-sonnet-5-5", missing) is None
    assert present.usage_reported is True
    assert response_cost("claude-sonnet-5-5", present) is not None


def test_a_reported_cost_is_used_without_usage() -> None:
    response = ModelResponse(parts=(), model=MODEL, usage_reported=False, reported_cost="0.5")
    assert response_cost(MODEL, response) == Decimal("0.5")


def test_a_custom_response_reports_its_usage_by_default() -> None:
    response = ModelResponse(parts=(), usage=Usage(input_tokens=100), model=MODEL)
    assert response.usage_reported is True
    assert response_cost(MODEL, response) == Decimal("0.000075")


def test_a_zero_cost_prints_as_zero_dollars() -> None:
    assert format_cost(Decimal("0E-8")) == "$0.00"


def test_a_zero_cost_is_fixed_point_in_a_breakdown() -> None:
    body = {**ANSWER, "usage": {"prompt_tokens": 0, "completion_tokens": 0}}
    run = Agent("zero_usage", model=MODEL, instructions="x", client=openai(body)).run("hello")
    assert run.cost == 0
    data = run.cost_breakdown().as_dict()
    texts = [data["cost"], data["known_cost"], data["by_model"][MODEL]["cost"],
             data["by_model"][MODEL]["known_cost"], data["by_turn"][0]["cost"],
             data["by_turn"][0]["known_cost"]]
    assert all(isinstance(text, str) and "E" not in text and Decimal(text) == 0
               for text in texts), texts
