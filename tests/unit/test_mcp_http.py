"""MCP tools over streamable HTTP (issue 39): the SDK's server app on loopback, in uvicorn.

The server (``tests/mcp_files_server.py``'s app) echoes the Authorization header it gets, as a
careless server might: the header's secret never reaches the transcript, the events or the logs.
"""

from __future__ import annotations

import logging
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import uvicorn

from tests.mcp_files_server import server
from turnkit_django import Agent, events
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import Message
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import MCPServer

pytestmark = [pytest.mark.django_db]

TOKEN = "sk-mcp-very-secret-token-123"


@contextmanager
def serving() -> Iterator[str]:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    config = uvicorn.Config(server.streamable_http_app(), host="127.0.0.1", port=port,
                            log_level="warning", lifespan="on")
    uv = uvicorn.Server(config)
    thread = threading.Thread(target=uv.run, name="mcp-http", daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not uv.started:  # waits for the server to listen (a condition, not a guess)
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the MCP server did not start within 10 s")
        time.sleep(0.02)
    try:
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        uv.should_exit = True
        thread.join(timeout=10)


def tool_result(request: ModelRequest) -> tuple[bool, object]:
    (result,) = request.messages[-1].tool_results
    return result.is_error, result.content


def test_http_tools_are_offered_called_and_the_header_secret_is_redacted(caplog):
    caplog.set_level(logging.DEBUG)
    seen: list[events.Event] = []

    def respond(request: ModelRequest) -> object:
        if request.messages[-1].role == "tool":
            return reply(f"{tool_result(request)}")
        if len([m for m in request.messages if m.role == "tool"]) == 0 and len(
                request.messages) == 1:
            return [call("whoami", id="call_1"), call("read", id="call_2", path="notes.txt")]
        return reply("done")

    client = FunctionClient(respond)
    with serving() as url:
        source = MCPServer.http(url, headers={"Authorization": f"Bearer {TOKEN}"},
                                allow=["read", "whoami"], name="files")
        assert TOKEN not in repr(source)
        agent = Agent("mcp-http", tools=[source], client=client, on_event=seen.append)
        run = agent.run("who am I?")
    assert run.status == "completed", run.error
    assert sorted(t.name for t in client.requests[0].tools) == ["read", "whoami"]
    results = [r for m in client.requests[1].messages for r in m.tool_results]
    assert [(r.is_error, r.content) for r in results] == [
        (False, "you sent [redacted]"), (False, "buy milk")]
    stored = " ".join(str(m.content) for m in Message.objects.filter(turn_id=run.id))
    assert "[redacted]" in stored and TOKEN not in stored
    assert TOKEN not in " ".join(str(e.payload) for e in seen)
    assert TOKEN not in caplog.text


def test_an_http_server_that_is_gone_is_a_tool_error():
    with serving() as url:
        pass  # stopped: nothing listens there any more
    client = FunctionClient(lambda request: reply(",".join(t.name for t in request.tools)))
    source = MCPServer.http(url, headers={"Authorization": f"Bearer {TOKEN}"}, name="gone",
                            list_timeout=5)
    run = Agent("mcp-gone", tools=[source], client=client).run("go")
    assert run.status == "completed", run.error
    assert run.output_text == ""
    assert TOKEN not in str(run.row.state)
