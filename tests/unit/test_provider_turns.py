"""Whole turns through the runtime with each provider client on a mock transport.

model -> two tool calls -> model -> answer, asserting the exact body of every request: the
replayed assistant blocks (thinking with its signature) and the tool results paired by id. A
canary API key must not reach any stored row, event, log record or error.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest
from django.apps import apps
from django.core import serializers

from tests.unit.fixtures.wire import Wire, allow_network, anthropic_httpx, payloads
from turnkit_django import Agent, events, tool
from turnkit_django.clients import AnthropicClient, ModelRequest, OpenAIClient, Usage

pytestmark = pytest.mark.django_db

ANTHROPIC_CANARY = "sk-ant-CANARY-6b1d9e3f7a2c4e8b0d5f"
OPENAI_CANARY = "sk-proj-CANARY-1a7e3c9b5d2f4a6c8e0b"
TASK = "Where are orders 42 and 43?"
EPHEMERAL = {"type": "ephemeral"}


@tool
def lookup_order(order_id: str) -> dict[str, str]:
    """Look up an order by id."""
    return {"order_id": order_id, "status": "shipped" if order_id == "42" else "packing"}


@pytest.fixture(autouse=True)
def _network() -> Iterator[None]:
    with allow_network():
        yield


@pytest.fixture
def recorded_events() -> Iterator[list[Any]]:
    seen: list[Any] = []

    def receiver(sender: Any, event: Any, **kwargs: Any) -> None:
        seen.append(event)

    events.event.connect(receiver, weak=False)
    yield seen
    events.event.disconnect(receiver)


def run_turn(
    agent: Agent, capture: Callable[..., Any], task: str = TASK
) -> tuple[Any, ModelRequest]:
    """Prepare, preview and execute a run, running on-commit event delivery."""
    with capture(execute=True):
        run = agent.prepare(task)
        preview = run.preview()
        run.execute()
    run.refresh()
    return run, preview


def assert_absent(secret: str, recorded: list[Any], records: list[logging.LogRecord]) -> None:
    """Fail if ``secret`` is in any turnkit row, recorded event or log record."""
    dumped = 0
    for model in apps.get_app_config("turnkit").get_models():
        rows = list(model._default_manager.all())
        dumped += len(rows)
        assert secret not in serializers.serialize("json", rows), model.__name__
    assert dumped, "nothing was stored"
    assert recorded, "no events were sent"
    for event in recorded:
        assert secret not in repr(event)
    for record in records:
        assert secret not in logging.Formatter().format(record)


def test_anthropic_turn_replays_thinking_and_pairs_results(
    registered: Any,
    django_capture_on_commit_callbacks: Callable[..., Any],
    recorded_events: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    p = payloads("anthropic")
    wire = Wire(anthropic_httpx(), (200, p["thinking_two_tool_calls"]), (200, p["final_answer"]))
    client = AnthropicClient(api_key=ANTHROPIC_CANARY, http_client=wire.client(), max_retries=0)
    agent = registered(
        Agent(
            "orders_claude",
            instructions="Help customers with their orders.",
            model="claude-sonnet-5-5",
            tools=[lookup_order],
            client=client,
            thinking={"budget": 2048},
        )
    )
    run, preview = run_turn(agent, django_capture_on_commit_callbacks)
    assert run.status == "completed", run.error

    system = [{"type": "text", "text": preview.stable_instructions, "cache_control": EPHEMERAL}]
    if preview.dynamic_instructions:
        system.append({"type": "text", "text": preview.dynamic_instructions})
    tools = [
        {"name": t.name, "description": t.description, "input_schema": t.parameters}
        for t in preview.tools
    ]
    assert [t["name"] for t in tools] == ["lookup_order"]
    first_step = {
        "model": "claude-sonnet-5-5",
        "max_tokens": 4096,
        "thinking": {"type": "enabled", "budget_tokens": 2048},
        "system": system,
        "tools": tools,
        "cache_control": EPHEMERAL,
        "messages": [{"role": "user", "content": [{"type": "text", "text": TASK}]}],
    }
    assert wire.bodies[0] == first_step
    assert wire.bodies[1] == {
        **first_step,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": TASK}]},
            {"role": "assistant", "content": p["thinking_two_tool_calls"]["content"]},
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01D7FLrfh4GYq7yT1ULFeyMV",
                        "content": '{"order_id": "42", "status": "shipped"}',
                    },
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_01GkXz8Pq3Hm5Nn2Lr6Ts9Wc",
                        "content": '{"order_id": "43", "status": "packing"}',
                    },
                ],
            },
        ],
    }
    assert run.output_text == "Order 42 shipped; order 43 is still being packed."
    assert run.usage == Usage(
        input_tokens=96 + 120,
        output_tokens=187 + 16,
        cache_read_tokens=2242 + 2754,
        cache_write_tokens=512 + 300,
    )
    # Step 1 came from a dated Sonnet 4.5 snapshot ($3/$15/$0.30/$3.75), step 2 from Sonnet 5.5.
    step1 = Decimal(96 * 3 + 187 * 15) + Decimal("2242") * Decimal("0.30") + 512 * Decimal("3.75")
    step2 = Decimal(120 * 2 + 16 * 10) + Decimal("2754") * Decimal("0.10") + 300 * Decimal("2.50")
    assert Decimal(run.cost) == ((step1 + step2) / 1_000_000).quantize(Decimal("0.00000001"))
    assert_absent(ANTHROPIC_CANARY, recorded_events, caplog.records)


def test_openai_turn_sends_tool_calls_and_paired_tool_messages(
    registered: Any,
    django_capture_on_commit_callbacks: Callable[..., Any],
    recorded_events: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    p = payloads("openai")
    calls = p["two_tool_calls"]["choices"][0]["message"]["tool_calls"]
    calls[1]["function"]["arguments"] = '{"order_id": "43"}'
    wire = Wire(httpx, (200, p["two_tool_calls"]), (200, p["final_answer"]))
    client = OpenAIClient(
        api_key=OPENAI_CANARY, transport=httpx.MockTransport(wire.handler), sleep=lambda s: None
    )
    agent = registered(
        Agent(
            "orders_gpt",
            instructions="Help customers with their orders.",
            model="gpt-5.4-mini",
            tools=[lookup_order],
            client=client,
        )
    )
    run, preview = run_turn(agent, django_capture_on_commit_callbacks)
    assert run.status == "completed", run.error

    head = {
        "model": "gpt-5.4-mini",
        "tools": [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description,
                    "parameters": t.parameters,
                },
            }
            for t in preview.tools
        ],
    }
    # The system message is the stable prompt only; the dynamic part is a snapshot message
    # in the history (appended once), so the cached prefix grows from step to step.
    system = {"role": "system", "content": preview.stable_instructions}
    question = {"role": "user", "content": TASK}
    snapshot = {"role": "user", "content": preview.messages[-1].text}
    assert preview.dynamic_instructions == "" and "## Environment" in snapshot["content"]
    assert wire.bodies[0] == {**head, "messages": [system, question, snapshot]}
    assert wire.bodies[1] == {
        **head,
        "messages": [
            system,
            question,
            snapshot,
            {"role": "assistant", "content": "Checking both orders.", "tool_calls": calls},
            {
                "role": "tool",
                "tool_call_id": "call_A1b2C3d4E5f6G7h8I9j0K1l2",
                "content": '{"order_id": "42", "status": "shipped"}',
            },
            {
                "role": "tool",
                "tool_call_id": "call_M3n4O5p6Q7r8S9t0U1v2W3x4",
                "content": '{"order_id": "43", "status": "packing"}',
            },
        ],
    }
    assert run.output_text == "Order 42 shipped; order 43 is still being packed."
    assert run.usage == Usage(
        input_tokens=(1400 - 1280) + (1530 - 1408),
        output_tokens=44 + 14,
        cache_read_tokens=1280 + 1408,
    )
    assert_absent(OPENAI_CANARY, recorded_events, caplog.records)


@pytest.mark.parametrize("status", [401, 500])
@pytest.mark.parametrize("provider", ["anthropic", "openai"])
def test_failed_request_leaves_no_canary_anywhere(
    provider: str,
    status: int,
    registered: Any,
    django_capture_on_commit_callbacks: Callable[..., Any],
    recorded_events: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    p = payloads(provider)
    body = p[f"error_{status}"]
    if provider == "anthropic":
        canary = ANTHROPIC_CANARY
        wire = Wire(anthropic_httpx(), *[(status, body, {"retry-after-ms": "1"})] * 2)
        client: Any = AnthropicClient(api_key=canary, http_client=wire.client(), max_retries=1)
    else:
        canary = OPENAI_CANARY
        wire = Wire(httpx, *[(status, body)] * 2)
        transport = httpx.MockTransport(wire.handler)
        client = OpenAIClient(
            api_key=canary, transport=transport, max_retries=1, sleep=lambda s: None
        )
    agent = registered(
        Agent(f"failing_{provider}", model="m-1", tools=[lookup_order], client=client)
    )
    run, _ = run_turn(agent, django_capture_on_commit_callbacks, task="hi")
    assert run.status == "failed"
    assert run.error["type"] == ("ModelAccessError" if status == 401 else "ModelError")
    assert str(status) in run.error["message"]
    assert len(wire.requests) == (1 if status == 401 else 2)
    assert canary in " ".join(wire.requests[0].headers.values())  # it was sent
    assert_absent(canary, recorded_events, caplog.records)


SECRET = "sk-live-SUPERSECRET123456"
ECHO = {"error": {"type": "invalid_request_error", "message": f"bad header value {SECRET!r}"}}


def _openai(wire: Wire, **options: Any) -> OpenAIClient:
    return OpenAIClient(transport=httpx.MockTransport(wire.handler), max_retries=0, **options)


def _anthropic(wire: Wire, **options: Any) -> AnthropicClient:
    return AnthropicClient(api_key="sk-ant-other", http_client=wire.client(), max_retries=0,
                           **options)


# Each case: the client's options and the wire's answer (refused connection or an echoed secret).
SECRET_CASES: dict[str, tuple[Callable[..., Any], str, dict[str, Any], Any]] = {
    "openai url userinfo": (_openai, "httpx", {
        "base_url": f"http://user:{SECRET}@127.0.0.1:1/v1"}, "connect"),
    "openai url query": (_openai, "httpx", {
        "base_url": f"http://127.0.0.1:1/v1?key={SECRET}"}, "connect"),
    "openai echoed userinfo": (_openai, "httpx", {
        "base_url": f"http://user:{SECRET}@llm.internal/v1"}, (400, ECHO)),
    "openai echoed api-key header": (_openai, "httpx", {
        "base_url": "http://llm.internal/v1", "extra_headers": {"api-key": SECRET}}, (400, ECHO)),
    "openai echoed bearer in a token header": (_openai, "httpx", {
        "base_url": "http://llm.internal/v1",
        "extra_headers": {"X-Gateway-Token": f"Bearer {SECRET}"}}, (500, ECHO)),
    "anthropic url userinfo": (_anthropic, "anthropic", {
        "base_url": f"http://u:{SECRET}@127.0.0.1:1"}, "connect"),
    "anthropic echoed proxy header": (_anthropic, "anthropic", {
        "base_url": "http://llm.internal", "default_headers": {"x-proxy-key": SECRET}},
        (400, ECHO)),
}


@pytest.mark.parametrize("case", SECRET_CASES)
def test_credentials_in_base_url_and_headers_reach_no_error_row_event_or_log(
    case: str,
    registered: Any,
    django_capture_on_commit_callbacks: Callable[..., Any],
    recorded_events: list[Any],
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    make, package, options, answer = SECRET_CASES[case]
    wire = Wire(anthropic_httpx() if package == "anthropic" else httpx, answer)
    client = make(wire, **options)
    assert SECRET not in repr(client)
    agent = registered(Agent("secretive", model="m-1", client=client))
    run, _ = run_turn(agent, django_capture_on_commit_callbacks, task="hi")
    assert run.status == "failed"
    assert run.error["type"] == "ModelError"
    assert SECRET not in run.error["message"]
    assert wire.requests, "the request was not made"
    assert_absent(SECRET, recorded_events, caplog.records)
