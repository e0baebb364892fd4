"""A server that echoes the request's headers in its error must not leak base_url credentials.

providers.md: error text has "every credential the client holds removed, also where the
server's error body echoes it", including the user name and password of ``base_url``. httpx
sends those as an ``Authorization: Basic`` header, so its encoded value is a credential too.
"""

from __future__ import annotations

from base64 import b64encode
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from tests.unit.fixtures.wire import allow_network, anthropic_httpx, user
from turnkit_django.clients import AnthropicClient, ModelRequest, OpenAIClient
from turnkit_django.exceptions import ModelError

BASE = "https://gw-user:gw-pass-SECRET@llm.internal/v1"
BASIC = b64encode(b"gw-user:gw-pass-SECRET").decode()


@pytest.fixture(autouse=True)
def _network() -> Iterator[None]:
    with allow_network():
        yield


def echo(http: Any) -> Any:
    """A transport answering 400 with the Authorization header it was sent in the message."""
    def handler(request: Any) -> Any:
        echoed = request.headers.get("authorization", "")
        return http.Response(400, json={"error": {
            "type": "invalid_request_error", "message": f"bad request; you sent {echoed}"}})
    return http.MockTransport(handler)


def test_openai_error_echoing_the_basic_header_is_redacted() -> None:
    client = OpenAIClient("gpt-5.4-mini", api_key=None, base_url=BASE,
                          transport=echo(httpx), max_retries=0)
    with pytest.raises(ModelError) as info:
        client.complete(ModelRequest(model="gpt-5.4-mini", messages=(user("hi"),)))
    assert "you sent" in str(info.value)
    assert BASIC not in str(info.value)


def test_anthropic_error_echoing_the_basic_header_is_redacted() -> None:
    http = anthropic_httpx()
    client = AnthropicClient("claude-sonnet-5-5", api_key="sk-ant-key-123456", base_url=BASE,
                             http_client=http.Client(transport=echo(http)), max_retries=0)
    with pytest.raises(ModelError) as info:
        client.complete(ModelRequest(model="claude-sonnet-5-5", messages=(user("hi"),)))
    assert "you sent" in str(info.value)
    assert BASIC not in str(info.value)


def test_anthropic_base_url_from_the_environment_is_split_and_redacted(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # providers.md: base_url defaults to the SDK's, which honours ANTHROPIC_BASE_URL.
    monkeypatch.setenv("ANTHROPIC_BASE_URL", BASE)
    http = anthropic_httpx()
    seen: list[Any] = []

    def handler(request: Any) -> Any:
        seen.append(request)
        return http.Response(400, json={"error": {
            "type": "invalid_request_error", "message": "bad gw-pass-SECRET"}})

    client = AnthropicClient("claude-sonnet-5-5", api_key="sk-ant-key-123456", max_retries=0,
                             http_client=http.Client(transport=http.MockTransport(handler)))
    with pytest.raises(ModelError) as info:
        client.complete(ModelRequest(model="claude-sonnet-5-5", messages=(user("hi"),)))
    assert "gw-pass-SECRET" not in str(seen[0].url)
    assert "gw-pass-SECRET" not in str(info.value) and "bad [redacted]" in str(info.value)
