"""OpenAIClient at the HTTP boundary: exact request bodies, parsed responses, retries, errors."""

from __future__ import annotations

import logging
from base64 import b64encode
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from typing import Any

import httpx
import pytest

from tests.unit.fixtures.wire import (
    LOOKUP,
    Wire,
    allow_network,
    assert_secret_absent,
    payloads,
    user,
)
from turnkit_django.clients import ModelRequest, ModelResponse, OpenAIClient, Usage
from turnkit_django.clients.openai import retry_after
from turnkit_django.exceptions import ModelAccessError, ModelError, ModelRateLimited
from turnkit_django.messages import (
    ChatMessage,
    DataPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from turnkit_django.testing import block_model_requests

P = payloads("openai")
MODEL = "gpt-5.4-mini"
KEY = "sk-proj-unit-test-key"
URL = "https://api.openai.com/v1/chat/completions"
LOOKUP_WIRE = {
    "type": "function",
    "function": {
        "name": "lookup_order",
        "description": "Look up an order by id.",
        "parameters": LOOKUP.parameters,
    },
}


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with allow_network():
        yield


class Sleeps(list[float]):
    def __call__(self, seconds: float) -> None:
        self.append(seconds)


def make(*script: Any, **options: Any) -> tuple[OpenAIClient, Wire, Sleeps]:
    wire = Wire(httpx, *script)
    sleeps = Sleeps()
    options.setdefault("api_key", KEY)
    client = OpenAIClient(transport=httpx.MockTransport(wire.handler), sleep=sleeps, **options)
    return client, wire, sleeps


def request(*messages: ChatMessage, **changes: Any) -> ModelRequest:
    return ModelRequest(model=MODEL, messages=messages, **changes)


def test_text_response_from_an_exact_request() -> None:
    client, wire, _ = make((200, P["text"]), organization="org-test")
    response = client.complete(
        request(
            user("Where is order 42?"),
            stable_instructions="You help customers with orders.",
            dynamic_instructions="Today is 2026-11-30.",
        )
    )
    assert wire.bodies == [
        {
            "model": MODEL,
            "messages": [
                {
                    "role": "system",
                    "content": "You help customers with orders.\n\nToday is 2026-11-30.",
                },
                {"role": "user", "content": "Where is order 42?"},
            ],
        }
    ]
    sent = wire.requests[0]
    assert (sent.method, str(sent.url)) == ("POST", URL)
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["openai-organization"] == "org-test"
    # prompt_tokens (2048) includes the 1920 cached ones: they are counted once, as cache reads.
    assert response == ModelResponse(
        parts=(TextPart("Your order 42 shipped yesterday."),),
        usage=Usage(input_tokens=128, output_tokens=9, cache_read_tokens=1920),
        model="gpt-5.4-mini-2026-03-17",
        stop_reason="end_turn",
        provider="openai",
    )


def test_one_tool_call() -> None:
    client, wire, _ = make((200, P["one_tool_call"]))
    response = client.complete(request(user("Where is order 42?"), tools=(LOOKUP,)))
    assert wire.bodies[0]["tools"] == [LOOKUP_WIRE]
    assert response.parts == (
        ToolCallPart(
            id="call_Kx7pQ2mN9vR4tY1wZ3aB5cD8", name="lookup_order", arguments={"order_id": "42"}
        ),
    )
    assert response.stop_reason == "tool_use"


def test_two_tool_calls_one_malformed_then_results_paired_by_id() -> None:
    client, wire, _ = make((200, P["two_tool_calls"]), (200, P["final_answer"]))
    question = user("Where are orders 42 and 43?")
    first = client.complete(request(question, tools=(LOOKUP,)))
    assert first.parts == (
        TextPart("Checking both orders."),
        ToolCallPart(
            id="call_A1b2C3d4E5f6G7h8I9j0K1l2", name="lookup_order", arguments={"order_id": "42"}
        ),
        ToolCallPart(
            id="call_M3n4O5p6Q7r8S9t0U1v2W3x4",
            name="lookup_order",
            arguments={},
            raw_arguments='{"order_id": "43"',
        ),
    )
    assert first.usage == Usage(120, 44, 1280, 0)

    transcript = (
        question,
        ChatMessage("assistant", first.parts),
        ChatMessage(
            "tool",
            (
                ToolResultPart(
                    "call_A1b2C3d4E5f6G7h8I9j0K1l2", "lookup_order", {"status": "shipped"}
                ),
                ToolResultPart(
                    "call_M3n4O5p6Q7r8S9t0U1v2W3x4",
                    "lookup_order",
                    "arguments were not valid JSON",
                    is_error=True,
                ),
            ),
        ),
    )
    final = client.complete(request(*transcript, tools=(LOOKUP,)))
    assert wire.bodies[1] == {
        "model": MODEL,
        "tools": [LOOKUP_WIRE],
        "messages": [
            {"role": "user", "content": "Where are orders 42 and 43?"},
            {
                "role": "assistant",
                "content": "Checking both orders.",
                "tool_calls": [
                    {
                        "id": "call_A1b2C3d4E5f6G7h8I9j0K1l2",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id": "42"}'},
                    },
                    {
                        "id": "call_M3n4O5p6Q7r8S9t0U1v2W3x4",
                        "type": "function",
                        "function": {"name": "lookup_order", "arguments": '{"order_id": "43"'},
                    },
                ],
            },
            {
                "role": "tool",
                "tool_call_id": "call_A1b2C3d4E5f6G7h8I9j0K1l2",
                "content": '{"status": "shipped"}',
            },
            {
                "role": "tool",
                "tool_call_id": "call_M3n4O5p6Q7r8S9t0U1v2W3x4",
                "content": "arguments were not valid JSON",
            },
        ],
    }
    assert final.text == "Order 42 shipped; order 43 is still being packed."


def test_tool_call_only_assistant_message_has_null_content() -> None:
    call = ToolCallPart(id="call_1", name="lookup_order", arguments={"order_id": "1"})
    body = OpenAIClient(api_key=KEY).build_request(
        request(user("Order 1?"), ChatMessage("assistant", (call,)))
    )
    assert body["messages"][1] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_1",
                "type": "function",
                "function": {"name": "lookup_order", "arguments": '{"order_id": "1"}'},
            }
        ],
    }


def test_structured_output_uses_response_format_json_schema() -> None:
    schema = {
        "title": "Ticket Triage",
        "type": "object",
        "properties": {"priority": {"type": "string"}, "reason": {"type": "string"}},
        "required": ["priority", "reason"],
        "additionalProperties": False,
    }
    client, wire, _ = make((200, P["structured"]), strict_output=True, max_tokens=500)
    response = client.complete(request(user("Triage this ticket."), output_schema=schema))
    assert wire.bodies[0]["response_format"] == {
        "type": "json_schema",
        "json_schema": {"name": "Ticket_Triage", "schema": schema, "strict": True},
    }
    assert wire.bodies[0]["max_completion_tokens"] == 500
    raw = P["structured"]["choices"][0]["message"]["content"]
    assert response.parts == (
        TextPart(raw),
        DataPart({"priority": "high", "reason": "refund requested"}),
    )
    # Replayed as the JSON text; a data-only message (scripted transcripts) as JSON.
    body = client.build_request(
        request(
            ChatMessage("assistant", response.parts),
            ChatMessage("assistant", (DataPart({"a": 1}),)),
        )
    )
    assert body["messages"] == [
        {"role": "assistant", "content": raw},
        {"role": "assistant", "content": '{"a": 1}'},
    ]


def test_refusal_is_text_with_a_refusal_stop_reason() -> None:
    client, _, _ = make((200, P["refusal"]))
    response = client.complete(request(user("..."), output_schema={"type": "object"}))
    assert response.parts == (TextPart("I'm sorry, I can't help with that request."),)
    assert response.stop_reason == "refusal"
    assert response.output_data is None


def test_local_server_reasoning_is_kept_but_not_sent_back_and_no_key_is_needed() -> None:
    base = "http://127.0.0.1:8000/v1"
    client, wire, _ = make(
        (200, P["reasoning_vllm"]), (200, P["reasoning_vllm"]), api_key=None, base_url=base
    )
    assert client.missing_credentials() is None
    first = client.complete(request(user("Hello"), thinking={"effort": "low", "budget": 1000}))
    assert first.parts == (
        ThinkingPart(text="The user greets me; answer briefly.", provider="openai"),
        TextPart("Hello!"),
    )
    assert first.usage == Usage(12, 18, 0, 0)
    client.complete(request(user("Hello"), ChatMessage("assistant", first.parts), user("Bye")))
    assert str(wire.requests[0].url) == f"{base}/chat/completions"
    assert "authorization" not in wire.requests[0].headers
    assert wire.bodies[0]["reasoning_effort"] == "low"
    assert wire.bodies[1]["messages"][1] == {"role": "assistant", "content": "Hello!"}


def test_environment_configures_base_url_and_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OPENAI_BASE_URL", "https://openrouter.ai/api/v1/")
    monkeypatch.setenv("OPENAI_API_KEY", "sk-or-v1-env-key")
    client, wire, _ = make(
        (200, P["openrouter_cost"]), api_key=None, extra_headers={"X-Title": "turnkit"}
    )
    response = client.complete(request(user("hi")))
    sent = wire.requests[0]
    assert str(sent.url) == "https://openrouter.ai/api/v1/chat/completions"
    assert sent.headers["authorization"] == "Bearer sk-or-v1-env-key"
    assert sent.headers["x-title"] == "turnkit"
    assert response.reported_cost == "0.003075"
    assert response.model == "anthropic/claude-sonnet-4.5"


def test_missing_key_for_openai_itself_is_a_model_access_error() -> None:
    client, wire, _ = make((200, P["text"]), api_key=None)
    assert "OPENAI_API_KEY" in (client.missing_credentials() or "")
    with pytest.raises(ModelAccessError, match="OPENAI_API_KEY"):
        client.complete(request(user("hi")))
    assert wire.requests == []


def test_401_is_a_model_access_error_without_the_providers_key_echo() -> None:
    client, wire, sleeps = make((401, P["error_401"]))
    with pytest.raises(ModelAccessError) as info:
        client.complete(request(user("hi")))
    text = str(info.value)
    assert (info.value.status, info.value.retryable) == (401, False)
    assert "invalid_api_key" in text and "OPENAI_API_KEY" in text
    assert "sk-CANAR" not in text  # the provider's message quotes part of the key
    assert (len(wire.requests), sleeps) == (1, [])


@pytest.mark.parametrize(
    ("status", "name", "words"),
    [
        (400, "error_400", ["invalid_request_error", "must be a response to a preceeding message"]),
        (404, "error_404", ["model_not_found", "`gpt-9` does not exist", "Check the model name"]),
        (404, "error_ollama_404", ['model "llama9" not found']),
        (429, "error_quota", ["insufficient_quota", "exceeded your current quota"]),
    ],
)
def test_errors_that_waiting_does_not_fix_are_not_retried(
    status: int, name: str, words: list[str]
) -> None:
    client, wire, sleeps = make((status, P[name]))
    with pytest.raises(ModelError) as info:
        client.complete(request(user("hi")))
    assert not isinstance(info.value, ModelAccessError)
    assert (info.value.status, info.value.retryable) == (status, False)
    for word in words:
        assert word in str(info.value)
    assert (len(wire.requests), sleeps) == (1, [])


def test_429_then_success_honours_retry_after() -> None:
    client, wire, sleeps = make(
        (429, P["error_429"], {"Retry-After": "2"}),
        (429, P["error_429"], {"retry-after-ms": "120"}),
        (200, P["text"]),
    )
    response = client.complete(request(user("hi")))
    assert response.text == "Your order 42 shipped yesterday."
    assert sleeps == [2.0, 0.12]
    assert wire.bodies[0] == wire.bodies[1] == wire.bodies[2]


def test_500_until_retries_run_out_backs_off_exponentially() -> None:
    fail = (500, P["error_500"])
    client, wire, sleeps = make(fail, fail, fail, fail, max_retries=3, backoff=0.5)
    with pytest.raises(ModelError) as info:
        client.complete(request(user("hi")))
    assert (info.value.status, info.value.retryable) == (500, True)
    assert "server_error" in str(info.value)
    assert len(wire.requests) == 4
    assert sleeps == [0.5, 1.0, 2.0]


def test_waits_are_capped() -> None:
    client, _, sleeps = make((503, {}, {"Retry-After": "3600"}), (200, P["text"]), max_backoff=10.0)
    client.complete(request(user("hi")))
    assert sleeps == [10.0]


def test_timeouts_and_connection_errors_are_retried_then_fail_retryable() -> None:
    client, wire, sleeps = make("timeout", "connect", "timeout", max_retries=2, timeout=3.0)
    with pytest.raises(ModelError, match=r"timed out \(timeout 3.0s\)") as info:
        client.complete(request(user("hi")))
    assert info.value.retryable
    assert (len(wire.requests), sleeps) == (3, [0.5, 1.0])
    client, _, _ = make("timeout", (200, P["text"]), max_retries=1)
    assert client.complete(request(user("hi"))).text


def test_non_json_success_points_at_the_base_url() -> None:
    wire = Wire(httpx)
    transport = httpx.MockTransport(lambda r: httpx.Response(200, text="<html>login</html>"))
    client = OpenAIClient(api_key=KEY, base_url="http://localhost:1234", transport=transport)
    with pytest.raises(ModelError, match="base_url"):
        client.complete(request(user("hi")))
    assert wire.requests == []


def test_block_model_requests_stops_the_client() -> None:
    client, wire, _ = make((200, P["text"]))
    with block_model_requests(), pytest.raises(ModelAccessError, match="block_model_requests"):
        client.complete(request(user("hi")))
    assert wire.requests == []


def test_retry_after_parsing() -> None:
    later = format_datetime(datetime.now(UTC) + timedelta(seconds=30), usegmt=True)
    assert 25 < (retry_after(httpx.Headers({"Retry-After": later})) or 0) <= 30
    assert retry_after(httpx.Headers({"Retry-After": "1.5"})) == 1.5
    assert retry_after(httpx.Headers({"retry-after-ms": "250", "Retry-After": "9"})) == 0.25
    assert retry_after(httpx.Headers({"Retry-After": "soon"})) is None
    assert retry_after(httpx.Headers()) is None


@pytest.mark.parametrize(("status", "name"), [(401, "error_401"), (500, "error_500")])
def test_canary_key_never_reaches_errors_or_logs(
    status: int, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "sk-proj-CANARY-8d2e4f6a1b3c5d7e9f0a"
    caplog.set_level(logging.DEBUG)
    body = P[name]
    body["error"]["message"] = f"echo {canary} from a careless proxy"
    client, wire, _ = make((status, body), (status, body), api_key=canary, max_retries=1)
    with pytest.raises(ModelError) as info:
        client.complete(request(user("hi")))
    assert wire.requests[0].headers["authorization"] == f"Bearer {canary}"
    assert_secret_absent(canary, info.value, caplog.records)
    assert canary not in repr(client)
    if status == 500:
        assert any(r.name == "turnkit_django.clients.openai" for r in caplog.records)


def test_base_url_credentials_go_in_a_header_and_its_query_follows_the_path(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    base = "http://gw-user:gw-pass-SECRET@llm.internal/v1/?api-version=2024-06-01"
    client, wire, _ = make((200, P["text"]), api_key=None, base_url=base)
    assert client.complete(request(user("hi"))).text
    sent = wire.requests[0]
    # The URL httpx logs holds no password; the server gets the Basic header httpx would send.
    assert str(sent.url) == "http://llm.internal/v1/chat/completions?api-version=2024-06-01"
    assert sent.headers["authorization"] == "Basic " + b64encode(b"gw-user:gw-pass-SECRET").decode()
    assert repr(client) == "OpenAIClient(model=None, base_url='http://llm.internal/v1/')"
    assert not [r for r in caplog.records if "gw-pass-SECRET" in r.getMessage()]


def test_a_key_in_the_base_url_query_is_sent_but_redacted_from_errors(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    canary = "gw-CANARY-5c2e8a1f"
    body = P["error_400"]
    body["error"]["message"] = f"no access for key={canary}"
    client, wire, _ = make((400, body), api_key=None,
                           base_url=f"http://llm.internal/v1?key={canary}")
    with pytest.raises(ModelError) as info:
        client.complete(request(user("hi")))
    assert wire.requests[0].url.params["key"] == canary  # it was sent
    assert str(info.value).startswith("OpenAI-compatible API at http://llm.internal/v1 request")
    assert "key=[redacted]" in str(info.value)
    # httpx itself logs every request URL, query included, at INFO (documented in providers.md).
    ours = [r for r in caplog.records if r.name != "httpx"]
    assert_secret_absent(canary, info.value, ours)


def test_429_after_the_last_retry_is_a_rate_limit_carrying_retry_after() -> None:
    refused = (429, P["error_429"], {"Retry-After": "7"})
    client, _, _ = make(refused, refused, max_retries=1)
    with pytest.raises(ModelRateLimited) as info:
        client.complete(request(user("hi")))
    assert (info.value.status, info.value.retry_after) == (429, 7.0)
