"""The GitHub tool's answers are bounded, and its source links are quoted: a huge answer was read
whole into memory, and a file path went into ``source_url`` as the model gave it."""

from __future__ import annotations

import base64
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from turnkit_django import ConfigurationError, ToolError
from turnkit_django.tools.github import MAX_RESPONSE_BYTES, GitHubTool


def github(handler: Any, **options: Any) -> GitHubTool:
    return GitHubTool("django/django", transport=httpx.MockTransport(handler), **options)


def ask(tool_: GitHubTool, **arguments: Any) -> Any:
    return tool_.call(None, tool_.validate(arguments))  # type: ignore[arg-type]


def test_an_answer_over_the_limit_is_a_tool_error_and_is_not_read_whole() -> None:
    sent: list[int] = []

    def endless() -> Iterator[bytes]:  # no Content-Length: only reading tells the size
        yield b'{"number": 7, "body": "'
        while True:
            sent.append(1)
            yield b"x" * 65_536

    tool_ = github(lambda request: httpx.Response(200, content=endless()),
                   max_response_bytes=1_000_000)
    with pytest.raises(ToolError, match=r"over 1000000 bytes.*ask for less") as raised:
        ask(tool_, operation="issue", number=7)
    assert "api.github.com" not in str(raised.value)
    assert len(sent) <= 1_000_000 // 65_536 + 2, "reading stopped at the limit"


def test_a_declared_length_over_the_limit_is_refused_before_reading() -> None:
    body = b'{"number": 7}' + b" " * 2_000
    tool_ = github(lambda request: httpx.Response(200, content=body), max_response_bytes=1_000)
    with pytest.raises(ToolError, match="over 1000 bytes"):
        ask(tool_, operation="issue", number=7)
    assert ask(github(lambda request: httpx.Response(200, content=body)),
               operation="issue", number=7)["data"]["number"] == 7


def test_an_error_answer_over_the_limit_is_refused_too() -> None:
    tool_ = github(lambda request: httpx.Response(500, json={"message": "x" * 5_000}),
                   max_response_bytes=1_000)
    with pytest.raises(ToolError, match="over 1000 bytes"):
        ask(tool_, operation="repository")


@pytest.mark.parametrize("bad", [0, -1, 1.5, True, "8MB", None])
def test_the_response_limit_is_a_whole_number_above_zero(bad: Any) -> None:
    with pytest.raises(ConfigurationError, match="max_response_bytes must be a whole number"):
        GitHubTool("django/django", max_response_bytes=bad)
    assert MAX_RESPONSE_BYTES == 8 * 1024 * 1024


@pytest.mark.parametrize(("path", "quoted"), [
    ("docs/a b?tab=x#frag", "docs/a%20b%3Ftab%3Dx%23frag"),
    ("%2e%2e/%2e%2e/evil/repo", "%252e%252e/%252e%252e/evil/repo"),
])
def test_the_source_url_quotes_the_path_the_model_gave(path: str, quoted: str) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        assert request.url.path == f"/repos/django/django/contents/{path}"
        if request.url.params.get("ref") == "dir":
            return httpx.Response(200, json=[{"name": "x", "path": f"{path}/x", "type": "file"}])
        return httpx.Response(200, json={"type": "file", "path": path, "size": 2,
                                         "content": base64.b64encode(b"hi").decode()})

    web = "https://github.com/django/django"
    assert ask(github(answer), operation="file", path=path)["source_url"] == (
        f"{web}/blob/HEAD/{quoted}")
    assert ask(github(answer), operation="file", path=path, ref="dir")["source_url"] == (
        f"{web}/tree/dir/{quoted}")
