"""AnthropicClient at the HTTP boundary: exact request bodies, parsed responses, errors."""

from __future__ import annotations

import copy
import logging
from base64 import b64encode
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.fixtures.wire import (
    LOOKUP,
    Wire,
    allow_network,
    anthropic_httpx,
    assert_secret_absent,
    payloads,
    user,
)
from turnkit_django.clients import AnthropicClient, ModelRequest, ModelResponse, Usage
from turnkit_django.exceptions import ModelAccessError, ModelError, ModelRateLimited
from turnkit_django.messages import (
    ChatMessage,
    DataPart,
    ProviderPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
    distinct_call_ids,
)
from turnkit_django.testing import block_model_requests

P = payloads("anthropic")
MODEL = "claude-sonnet-5-5"
KEY = "sk-ant-api03-unit-test-key"
EPHEMERAL = {"type": "ephemeral"}
LOOKUP_WIRE = {
    "name": "lookup_order",
    "description": "Look up an order by id.",
    "input_schema": LOOKUP.parameters,
}


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("ANTHROPIC_API_KEY", "ANTHROPIC_AUTH_TOKEN", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("ANTHROPIC_CUSTOM_HEADERS", raising=False)
    with allow_network():
        yield


def make(*script: Any, **options: Any) -> tuple[AnthropicClient, Wire]:
    wire = Wire(anthropic_httpx(), *script)
    options.setdefault("api_key", KEY)
    return AnthropicClient(http_client=wire.client(), **options), wire


def request(*messages: ChatMessage, **changes: Any) -> ModelRequest:
    return ModelRequest(model=MODEL, messages=messages, **changes)


def test_text_response_from_an_exact_request() -> None:
    client, wire = make((200, P["text"]))
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
            "max_tokens": 4096,
            "system": [
                {
                    "type": "text",
                    "text": "You help customers with orders.",
                    "cache_control": EPHEMERAL,
                },
                {"type": "text", "text": "Today is 2026-11-30."},
            ],
            "messages": [
                {"role": "user", "content": [{"type": "text", "text": "Where is order 42?"}]}
            ],
            "cache_control": EPHEMERAL,
        }
    ]
    sent = wire.requests[0]
    assert str(sent.url) == "https://api.anthropic.com/v1/messages"
    assert KEY in (sent.headers.get("x-api-key") or sent.headers.get("authorization", ""))
    assert response == ModelResponse(
        parts=(TextPart("Your order 42 shipped yesterday."),),
        usage=Usage(
            input_tokens=412, output_tokens=11, cache_read_tokens=0, cache_write_tokens=1830
        ),
        model="claude-sonnet-5-5",
        stop_reason="end_turn",
        provider="anthropic",
    )


def test_one_tool_call() -> None:
    client, wire = make((200, P["one_tool_call"]))
    response = client.complete(request(user("Where is order 42?"), tools=(LOOKUP,)))
    assert wire.bodies[0]["tools"] == [LOOKUP_WIRE]
    assert response.tool_calls == [
        ToolCallPart(
            id="toolu_01A09q90qw90lq917835lq9", name="lookup_order", arguments={"order_id": "42"}
        )
    ]
    assert response.stop_reason == "tool_use"
    assert response.usage == Usage(380, 41, 1830, 0)


def test_a_tool_call_without_an_id_is_left_for_the_runtime_to_name() -> None:
    """Not the text "None": two calls without ids would be refused as duplicates of it."""
    payload = copy.deepcopy(P["one_tool_call"])
    for block in payload["content"]:
        if block["type"] == "tool_use":
            del block["id"]
    client, _ = make((200, payload))
    response = client.complete(request(user("Where is order 42?"), tools=(LOOKUP,)))
    assert [call.id for call in response.tool_calls] == [""]
    assert distinct_call_ids(response.parts, ())[-1].id not in ("", "None")


def test_thinking_and_two_tool_calls_are_replayed_verbatim_with_paired_results() -> None:
    client, wire = make((200, P["thinking_two_tool_calls"]), (200, P["final_answer"]))
    question = user("Where are orders 42 and 43?")
    first = client.complete(request(question, tools=(LOOKUP,), thinking={"budget": 8000}))

    block = P["thinking_two_tool_calls"]["content"][0]
    assert first.parts == (
        ThinkingPart(text=block["thinking"], signature=block["signature"], provider="anthropic"),
        TextPart("Let me check both orders."),
        ToolCallPart(
            id="toolu_01D7FLrfh4GYq7yT1ULFeyMV", name="lookup_order", arguments={"order_id": "42"}
        ),
        ToolCallPart(
            id="toolu_01GkXz8Pq3Hm5Nn2Lr6Ts9Wc", name="lookup_order", arguments={"order_id": "43"}
        ),
    )
    assert first.usage == Usage(96, 187, 2242, 512)
    assert first.model == "claude-sonnet-4-5-20250929"

    calls = first.tool_calls
    transcript = (
        question,
        ChatMessage("assistant", first.parts),
        ChatMessage(
            "tool",
            (ToolResultPart(calls[0].id, "lookup_order", {"order_id": "42", "status": "shipped"}),),
        ),
        ChatMessage(
            "tool",
            (
                ToolResultPart(
                    calls[1].id, "lookup_order", "ToolError: order 43 is locked", is_error=True
                ),
            ),
        ),
    )
    final = client.complete(request(*transcript, tools=(LOOKUP,), thinking={"budget": 8000}))

    assert wire.bodies[0]["thinking"] == {"type": "enabled", "budget_tokens": 8000}
    assert wire.bodies[0]["max_tokens"] == 8000 + 4096  # must exceed the thinking budget
    assert wire.bodies[1] == {
        "model": MODEL,
        "max_tokens": 12096,
        "thinking": {"type": "enabled", "budget_tokens": 8000},
        "tools": [LOOKUP_WIRE],
        "cache_control": EPHEMERAL,
        "messages": [
            {"role": "user", "content": [{"type": "text", "text": "Where are orders 42 and 43?"}]},
            {"role": "assistant", "content": P["thinking_two_tool_calls"]["content"]},
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
                        "content": "ToolError: order 43 is locked",
                        "is_error": True,
                    },
                ],
            },
        ],
    }
    assert final.text == "Order 42 shipped; order 43 is still being packed."


def test_redacted_thinking_and_unknown_blocks_round_trip_and_foreign_thinking_is_dropped() -> None:
    client, wire = make((200, P["redacted_and_server_blocks"]), (200, P["text"]))
    first = client.complete(request(user("Any delays?")))
    redacted, server_block, text = P["redacted_and_server_blocks"]["content"]
    assert first.parts == (
        ThinkingPart(text="", signature=redacted["data"], provider="anthropic", redacted=True),
        ProviderPart(provider="anthropic", data=server_block),
        TextPart(text["text"]),
    )
    foreign = (
        ThinkingPart(text="other reasoning", signature="sig", provider="openai"),
        ThinkingPart(text="unsigned", provider="anthropic"),
        ProviderPart(provider="openai", data={"type": "reasoning"}),
    )
    client.complete(
        request(
            user("Any delays?"), ChatMessage("assistant", foreign + first.parts), user("Thanks")
        )
    )
    assert wire.bodies[1]["messages"][1] == {
        "role": "assistant",
        "content": [redacted, server_block, text],
    }


def test_structured_output_uses_output_config_and_keeps_the_json_text() -> None:
    schema = {
        "title": "Triage",
        "type": "object",
        "properties": {"priority": {"type": "string"}, "reason": {"type": "string"}},
        "required": ["priority", "reason"],
        "additionalProperties": False,
    }
    client, wire = make((200, P["structured"]), (200, P["text"]))
    response = client.complete(request(user("Triage this ticket."), output_schema=schema))
    assert wire.bodies[0]["output_config"] == {"format": {"type": "json_schema", "schema": schema}}
    raw = P["structured"]["content"][0]["text"]
    assert response.parts == (
        TextPart(raw),
        DataPart({"priority": "high", "reason": "refund requested"}),
    )
    assert response.output_data == {"priority": "high", "reason": "refund requested"}

    # Replay: the JSON text goes back as the model wrote it, the parsed copy is not repeated;
    # a transcript with data only (from a scripted client) is sent as JSON text.
    client.complete(
        request(
            user("Triage this ticket."),
            ChatMessage("assistant", response.parts),
            user("And this one?"),
            ChatMessage("assistant", (DataPart({"priority": "low"}),)),
            user("Thanks"),
        )
    )
    messages = wire.bodies[1]["messages"]
    assert messages[1]["content"] == [{"type": "text", "text": raw}]
    assert messages[3]["content"] == [{"type": "text", "text": '{"priority": "low"}'}]


def test_unparseable_structured_output_gives_text_without_data() -> None:
    payload = P["structured"]
    payload["content"][0]["text"] = "Sorry, I cannot classify this."
    client, _ = make((200, payload))
    response = client.complete(request(user("Triage."), output_schema={"type": "object"}))
    assert response.parts == (TextPart("Sorry, I cannot classify this."),)
    assert response.output_data is None


@pytest.mark.parametrize(
    ("thinking", "expected_thinking", "expected_output_config"),
    [
        ({"adaptive": True, "effort": "low"}, {"type": "adaptive"}, {"effort": "low"}),
        ({"effort": "high"}, None, {"effort": "high"}),
        (
            {"budget": 2048, "display": "omitted"},
            {"type": "enabled", "budget_tokens": 2048, "display": "omitted"},
            None,
        ),
        (
            {
                "type": "adaptive",
                "block_binding": {"prefix_mismatch_behavior": "drop_block"},
                "effort": "max",
            },
            {"type": "adaptive", "block_binding": {"prefix_mismatch_behavior": "drop_block"}},
            {"effort": "max"},
        ),
    ],
)
def test_thinking_options(
    thinking: dict[str, Any], expected_thinking: Any, expected_output_config: Any
) -> None:
    body = AnthropicClient(api_key=KEY).build_request(request(user("hi"), thinking=thinking))
    assert body.get("thinking") == expected_thinking
    assert body.get("output_config") == expected_output_config
    assert body["max_tokens"] == 4096


def test_unknown_thinking_option_is_refused() -> None:
    with pytest.raises(ModelError, match="unknown thinking options") as info:
        AnthropicClient(api_key=KEY).build_request(request(user("hi"), thinking={"budgett": 1}))
    assert not info.value.retryable


def test_without_prompt_caching_no_cache_markers_are_sent() -> None:
    body = AnthropicClient(api_key=KEY, prompt_caching=False).build_request(
        request(user("hi"), stable_instructions="Be brief.")
    )
    assert body == {
        "model": MODEL,
        "max_tokens": 4096,
        "system": [{"type": "text", "text": "Be brief."}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}],
    }


def test_same_role_messages_merge_with_tool_results_first() -> None:
    call = ToolCallPart(id="toolu_1", name="lookup_order", arguments={"order_id": "1"})
    body = AnthropicClient(api_key=KEY, max_tokens=100).build_request(
        request(
            user("Look up order 1."),
            ChatMessage("assistant", (call,)),
            ChatMessage("user", (TextPart("Also, hurry."),)),
            ChatMessage("tool", (ToolResultPart("toolu_1", "lookup_order", "shipped"),)),
        )
    )
    assert body["messages"][2] == {
        "role": "user",
        "content": [
            {"type": "tool_result", "tool_use_id": "toolu_1", "content": "shipped"},
            {"type": "text", "text": "Also, hurry."},
        ],
    }


def test_pinned_model_wins_and_a_missing_model_is_an_error() -> None:
    body = AnthropicClient("claude-opus-5-5", api_key=KEY).build_request(request(user("hi")))
    assert body["model"] == "claude-opus-5-5"
    with pytest.raises(ModelError, match="no model"):
        AnthropicClient(api_key=KEY).build_request(ModelRequest(model="", messages=(user("hi"),)))


def test_401_is_a_model_access_error_with_a_hint_and_no_retry() -> None:
    client, wire = make((401, P["error_401"], {"request-id": "req_011CSHoEeqs5C35K2UUqR7Fy"}))
    with pytest.raises(ModelAccessError) as info:
        client.complete(request(user("hi")))
    assert info.value.status == 401
    assert not info.value.retryable
    assert "authentication_error" in str(info.value)
    assert "ANTHROPIC_API_KEY" in str(info.value)
    assert len(wire.requests) == 1


def test_403_keeps_what_the_key_may_not_do_without_the_key() -> None:
    """Anthropic's 403 says what the key may not do (a model, a workspace): the text helps and is
    kept, with the key redacted; a 401's text (a rejected key) is left out."""
    body = {"type": "error", "error": {"type": "permission_error", "message":
            f"key {KEY} may not use model claude-opus-5-5 in this workspace"}}
    client, wire = make((403, body))
    with pytest.raises(ModelAccessError) as info:
        client.complete(request(user("hi")))
    text = str(info.value)
    assert info.value.status == 403 and not info.value.retryable
    assert "may not use model claude-opus-5-5" in text and "ANTHROPIC_API_KEY" in text
    assert KEY not in text and len(wire.requests) == 1


@pytest.mark.parametrize(
    ("status", "name", "words"),
    [
        (400, "error_400", ["invalid_request_error", "tool_use` ids were found"]),
        (404, "error_404", ["not_found_error", "claude-sonnet-9", "Check the model name"]),
    ],
)
def test_client_errors_fail_without_retry(status: int, name: str, words: list[str]) -> None:
    client, wire = make((status, P[name]))
    with pytest.raises(ModelError) as info:
        client.complete(request(user("hi")))
    assert not isinstance(info.value, ModelAccessError)
    assert (info.value.status, info.value.retryable) == (status, False)
    for word in words:
        assert word in str(info.value)
    assert len(wire.requests) == 1


def test_429_then_success_is_retried_by_the_sdk() -> None:
    client, wire = make((429, P["error_429"], {"retry-after-ms": "1"}), (200, P["text"]))
    response = client.complete(request(user("hi")))
    assert response.text == "Your order 42 shipped yesterday."
    assert len(wire.requests) == 2
    assert wire.bodies[0] == wire.bodies[1]


@pytest.mark.parametrize(("status", "name"), [(500, "error_500"), (529, "error_529")])
def test_server_errors_until_retries_run_out(status: int, name: str) -> None:
    fail = (status, P[name], {"retry-after-ms": "1"})
    client, wire = make(fail, fail, fail, max_retries=2)
    with pytest.raises(ModelError) as info:
        client.complete(request(user("hi")))
    assert (info.value.status, info.value.retryable) == (status, True)
    assert P[name]["error"]["type"] in str(info.value)
    assert len(wire.requests) == 3


def test_timeout_and_connection_errors_are_retryable_model_errors() -> None:
    client, _ = make("timeout", max_retries=0, timeout=5.0)
    with pytest.raises(ModelError, match="timed out") as info:
        client.complete(request(user("hi")))
    assert info.value.retryable
    client, _ = make("connect", max_retries=0)
    with pytest.raises(ModelError, match="could not connect") as info:
        client.complete(request(user("hi")))
    assert info.value.retryable


def test_missing_key_is_reported_at_request_time(monkeypatch: pytest.MonkeyPatch) -> None:
    client, wire = make((200, P["text"]), api_key=None)
    assert "ANTHROPIC_API_KEY" in (client.missing_credentials() or "")
    with pytest.raises(ModelAccessError, match="ANTHROPIC_API_KEY"):
        client.complete(request(user("hi")))
    assert wire.requests == []

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-from-environment")
    assert client.missing_credentials() is None
    client.complete(request(user("hi")))
    sent = wire.requests[0].headers
    assert "sk-ant-from-environment" in (sent.get("x-api-key") or sent.get("authorization", ""))


def test_block_model_requests_stops_the_client() -> None:
    client, wire = make((200, P["text"]))
    with block_model_requests(), pytest.raises(ModelAccessError, match="block_model_requests"):
        client.complete(request(user("hi")))
    assert wire.requests == []


@pytest.mark.parametrize(("status", "name"), [(401, "error_401"), (500, "error_500")])
def test_canary_key_never_reaches_errors_or_logs(
    status: int, name: str, caplog: pytest.LogCaptureFixture
) -> None:
    canary = "sk-ant-CANARY-3f9c1e7a5b2d4c6e8f0a"
    caplog.set_level(logging.DEBUG)
    fail = (status, P[name], {"retry-after-ms": "1"})
    client, wire = make(fail, fail, api_key=canary, max_retries=1)
    with pytest.raises(ModelError) as info:
        client.complete(request(user("hi")))
    assert canary in (
        wire.requests[0].headers.get("x-api-key") or wire.requests[0].headers["authorization"]
    )
    assert any(r.name.startswith("anthropic") for r in caplog.records)  # the SDK did log
    assert_secret_absent(canary, info.value, caplog.records)
    assert canary not in repr(client)


def test_base_url_credentials_go_in_a_header_not_in_the_urls_the_sdk_logs(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level(logging.DEBUG)
    base = "https://proxy-user:proxy-pass-SECRET@llm.internal"
    client, wire = make((200, P["text"]), base_url=base)
    assert client.complete(request(user("hi"))).text
    sent = wire.requests[0]
    # The header httpx makes of a URL's userinfo (it takes the place of the key's, as before).
    assert str(sent.url) == "https://llm.internal/v1/messages"
    assert sent.headers["authorization"] == "Basic " + b64encode(
        b"proxy-user:proxy-pass-SECRET").decode()
    assert repr(client) == "AnthropicClient(model=None, base_url='https://llm.internal')"
    assert any(r.name.startswith("anthropic") for r in caplog.records)  # the SDK did log
    assert not [r for r in caplog.records if "proxy-pass-SECRET" in r.getMessage()]


@pytest.mark.parametrize(("status", "name"), [(429, "error_429"), (529, "error_529")])
def test_rate_limited_and_overloaded_after_the_sdk_retries_carry_retry_after(
        status: int, name: str) -> None:
    refused = (status, P[name], {"retry-after": "3"})
    client, _ = make(refused, refused, max_retries=1)
    with pytest.raises(ModelRateLimited) as info:
        client.complete(request(user("hi")))
    assert (info.value.status, info.value.retry_after) == (status, 3.0)
