"""The MCP SDK's async client, driven from the synchronous runtime.

Each listing and each call opens its own connection (a stdio server is started for it and
stopped after it; a streamable-HTTP session is opened and closed), inside ``anyio.run`` with a
deadline: nothing outlives the call, and a server that died since the last call costs nothing
but that call. The ``mcp`` package is imported here only, on first use (the ``mcp`` extra).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from contextlib import AsyncExitStack
from dataclasses import dataclass, field
from importlib import import_module
from typing import TYPE_CHECKING, Any, TypeVar

import anyio

from ..base.serialization import JsonObject, JsonValue
from ..exceptions import ConfigurationError

if TYPE_CHECKING:
    from mcp import Client

T = TypeVar("T")


@dataclass(frozen=True)
class Endpoint:
    """Where an MCP server is: a command to start (stdio) or a URL (streamable HTTP)."""

    argv: tuple[str, ...] = ()
    env: Mapping[str, str] | None = None
    cwd: str | None = None
    url: str | None = None
    headers: Mapping[str, str] = field(default_factory=dict)


def _sdk(module: str) -> Any:
    try:
        return import_module(module)
    except ImportError as exc:  # pragma: no cover - depends on the environment
        raise ConfigurationError(
            "MCP tools need the official MCP SDK: pip install 'turnkit-django[mcp]'") from exc


async def _connect(stack: AsyncExitStack, endpoint: Endpoint) -> Client:
    if endpoint.url is None:
        server: Any = _sdk("mcp.client.stdio").StdioServerParameters(
            command=endpoint.argv[0], args=list(endpoint.argv[1:]),
            env=dict(endpoint.env) if endpoint.env is not None else None, cwd=endpoint.cwd)
    else:  # the SDK's HTTP client library (httpx2) comes with it
        http = await stack.enter_async_context(
            _sdk("httpx2").AsyncClient(headers=dict(endpoint.headers)))
        server = _sdk("mcp.client.streamable_http").streamable_http_client(
            endpoint.url, http_client=http)
    client: Client = await stack.enter_async_context(_sdk("mcp").Client(server, cache=None))
    return client


async def _list(endpoint: Endpoint) -> list[JsonObject]:
    async with AsyncExitStack() as stack:
        client = await _connect(stack, endpoint)
        found: list[JsonObject] = []
        cursor: str | None = None
        while True:
            page = await client.list_tools(cursor=cursor)
            found += [{"name": t.name, "description": t.description or "",
                       "schema": dict(t.input_schema or {"type": "object"})} for t in page.tools]
            cursor = page.next_cursor
            if not cursor:
                return found


async def _call(endpoint: Endpoint, name: str, arguments: JsonObject) -> tuple[bool, JsonValue]:
    async with AsyncExitStack() as stack:
        client = await _connect(stack, endpoint)
        result = await client.call_tool(name, arguments)
        return bool(result.is_error), _content(result)


def _content(result: Any) -> JsonValue:
    """What the model reads of a tool result: its text, else its structured content, else its
    content blocks as JSON."""
    blocks = list(result.content or ())
    if blocks and all(getattr(b, "type", None) == "text" for b in blocks):
        return "\n".join(b.text for b in blocks)
    if result.structured_content is not None:
        return dict(result.structured_content)
    dumped: list[JsonValue] = [b.model_dump(mode="json", exclude_none=True) for b in blocks]
    return dumped


def _run(work: Callable[[], Awaitable[T]], timeout: float) -> T:
    async def main() -> T:
        with anyio.fail_after(timeout):
            return await work()

    return anyio.run(main)


def list_tools(endpoint: Endpoint, timeout: float) -> list[JsonObject]:
    """The server's tools: ``{"name", "description", "schema"}`` each (raises on failure)."""
    return _run(lambda: _list(endpoint), timeout)


def call_tool(endpoint: Endpoint, name: str, arguments: JsonObject,
              timeout: float) -> tuple[bool, JsonValue]:
    """Call ``name``: whether the server reported an error, and the result's content."""
    return _run(lambda: _call(endpoint, name, arguments), timeout)


def leaf(exc: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups, which anyio's task groups raise."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


__all__ = ["Endpoint", "call_tool", "leaf", "list_tools"]
