"""Provider clients stream: a fake provider on loopback speaks Anthropic's event stream and an
OpenAI-compatible SSE stream; the chunks reach ``on_delta`` in order, and the response built
from the completed stream equals the one of the same exchange without streaming (usage too).
A stream that ends early, a malformed chunk or an error event mid-stream is a ModelError."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import pytest

from tests.unit.fixtures.sse_server import (
    Json,
    Stream,
    anthropic_frames,
    fake_provider,
    openai_frames,
)
from tests.unit.fixtures.wire import LOOKUP, allow_network, user
from turnkit_django.clients import AnthropicClient, ModelRequest, OpenAIClient
from turnkit_django.clients.protocol import BaseClient
from turnkit_django.exceptions import ModelError
from turnkit_django.messages import TextPart, ToolCallPart

TEXTS = [f"word{i} " for i in range(12)]
PIECES = ['{"order', '_id": ', '"42"}']
TOOL = ("call_1", "lookup_order", PIECES)


@pytest.fixture(autouse=True)
def _network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("ANTHROPIC_BASE_URL", "OPENAI_BASE_URL", "OPENAI_API_KEY"):
        monkeypatch.delenv(name, raising=False)
    with allow_network():
        yield


def _request(model: str, **changes: Any) -> ModelRequest:
    return ModelRequest(model=model, messages=(user("Where is order 42?"),), **changes)


def _anthropic(url: str) -> AnthropicClient:
    return AnthropicClient(api_key="sk-ant-test", base_url=url, max_retries=0, timeout=10)


def _openai(url: str) -> OpenAIClient:
    return OpenAIClient(api_key="sk-test", base_url=url, max_retries=0, timeout=10)


def _anthropic_json(text: str, tool: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": text}]
    if tool:
        content.append({"type": "tool_use", "id": "call_1", "name": "lookup_order",
                        "input": {"order_id": "42"}})
    return {"id": "msg_stream", "type": "message", "role": "assistant",
            "model": "claude-sonnet-5-5", "content": content,
            "stop_reason": "tool_use" if tool else "end_turn", "stop_sequence": None,
            "usage": {"input_tokens": 25, "output_tokens": 40, "cache_read_input_tokens": 7}}


def _openai_json(text: str, tool: bool = False) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": text}
    if tool:
        message["tool_calls"] = [{"id": "call_1", "type": "function", "function": {
            "name": "lookup_order", "arguments": "".join(PIECES)}}]
    return {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-5.1",
            "choices": [{"index": 0, "message": message,
                         "finish_reason": "tool_calls" if tool else "stop"}],
            "usage": {"prompt_tokens": 30, "completion_tokens": 40, "total_tokens": 70,
                      "prompt_tokens_details": {"cached_tokens": 5}}}


PROVIDERS = {
    "anthropic": (_anthropic, anthropic_frames, _anthropic_json, "claude-sonnet-5-5", ""),
    "openai": (_openai, openai_frames, _openai_json, "gpt-5.1", "/v1"),
}


def test_clients_declare_streaming():
    assert BaseClient.supports_streaming is False
    assert AnthropicClient.supports_streaming is OpenAIClient.supports_streaming is True


@pytest.mark.parametrize("name", PROVIDERS)
@pytest.mark.parametrize("with_tool", [False, True], ids=["text", "tool_call"])
def test_a_stream_delivers_its_deltas_in_order_and_the_response_of_a_plain_call(name, with_tool):
    make, frames, plain, model, path = PROVIDERS[name]
    tool = TOOL if with_tool else None
    text = "".join(TEXTS)
    with fake_provider(Stream(frames(TEXTS, tool=tool), delay=0.005),
                       Json(200, plain(text, with_tool)), path=path) as provider:
        client = make(provider.url)
        request = _request(model, tools=(LOOKUP,) if with_tool else ())
        seen: list[tuple[str, str]] = []
        streamed = client.stream(request, lambda kind, chunk: seen.append((kind, chunk)))
        unstreamed = client.complete(request)
    assert [chunk for kind, chunk in seen if kind == "text"] == TEXTS
    assert [chunk for kind, chunk in seen if kind == "tool_arguments"] == (
        PIECES if with_tool else [])
    assert streamed == unstreamed
    assert streamed.text == text
    assert streamed.usage.output_tokens == 40 and streamed.usage.input_tokens > 0
    assert streamed.usage.cache_read_tokens > 0 and streamed.usage_reported
    if with_tool:
        assert streamed.tool_calls == [ToolCallPart("call_1", "lookup_order", {"order_id": "42"})]
    else:
        assert streamed.parts == (TextPart(text),)
    if name == "openai":
        body = provider.bodies[0]
        assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
        assert "stream" not in provider.bodies[1]
    else:
        assert provider.bodies[0]["stream"] is True


def _error_event(name: str) -> str:
    if name == "anthropic":
        return ('event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
                '"message": "Overloaded"}}')
    return 'data: {"error": {"type": "server_error", "message": "The server had an error"}}'


BROKEN = {
    "ended_early": lambda name, frames: frames(TEXTS[:5])[:-3],
    "malformed_chunk": lambda name, frames: [
        *frames(TEXTS)[:4], ("event: content_block_delta\n" if name == "anthropic" else "")
        + "data: {not json", *frames(TEXTS)[4:]],
    "error_event": lambda name, frames: [*frames(TEXTS)[:4], _error_event(name)],
}


@pytest.mark.parametrize("name", PROVIDERS)
@pytest.mark.parametrize("broken", BROKEN)
def test_a_broken_stream_is_a_retryable_model_error(name, broken):
    make, frames, _plain, model, path = PROVIDERS[name]
    if name == "openai" and broken == "ended_early":
        script = openai_frames(TEXTS[:5], done=False)
    else:
        script = BROKEN[broken](name, frames)
    with fake_provider(Stream(script), path=path) as provider:
        with pytest.raises(ModelError) as raised:
            make(provider.url).stream(_request(model), lambda kind, chunk: None)
    assert raised.value.retryable, str(raised.value)
    assert "stream" in str(raised.value)


def test_an_openai_stream_without_usage_reports_none():
    with fake_provider(Stream(openai_frames(TEXTS, usage=False)), path="/v1") as provider:
        response = _openai(provider.url).stream(_request("gpt-5.1"), lambda kind, chunk: None)
    assert response.text == "".join(TEXTS) and response.usage_reported is False


def test_an_openai_stream_refused_by_status_is_the_plain_error():
    error = {"error": {"type": "invalid_request_error", "message": "bad model"}}
    with fake_provider(Json(404, error), path="/v1") as provider:
        with pytest.raises(ModelError, match=r"HTTP 404.*bad model") as raised:
            _openai(provider.url).stream(_request("gpt-5.1"), lambda kind, chunk: None)
    assert not raised.value.retryable
    assert json.dumps(provider.bodies[0]).count('"stream": true') == 1


@pytest.mark.parametrize("with_tool", [False, True], ids=["text", "tool_call"])
def test_an_openai_compatible_server_that_ignores_stream_answers_as_a_plain_call(with_tool):
    """Many OpenAI-compatible servers (proxies, local runtimes) ignore ``"stream": true`` and
    answer one JSON body: that is the response, its text delivered as one chunk."""
    text = "".join(TEXTS)
    with fake_provider(Json(200, _openai_json(text, with_tool)),
                       Json(200, _openai_json(text, with_tool)), path="/v1") as provider:
        client = _openai(provider.url)
        request = _request("gpt-5.1", tools=(LOOKUP,) if with_tool else ())
        seen: list[tuple[str, str]] = []
        streamed = client.stream(request, lambda kind, chunk: seen.append((kind, chunk)))
        unstreamed = client.complete(request)
    assert streamed == unstreamed and streamed.text == text
    assert seen[0] == ("text", text)
    assert [chunk for kind, chunk in seen if kind == "tool_arguments"] == (
        ["".join(PIECES)] if with_tool else [])
