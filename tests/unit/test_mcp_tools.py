"""MCP servers as tool sources (issue 39): a real stdio server built with the MCP SDK.

The server (``tests/mcp_files_server.py``) runs as a subprocess for each listing and each call.
Only the model is fake (``FunctionClient``, which sees the tools each request offers).
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.helpers import expire_lease
from turnkit_django import Agent, reconcile, services
from turnkit_django.base import failpoints
from turnkit_django.base.failpoints import SimulatedCrash
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.exceptions import ConfigurationError
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import MCPServer

pytestmark = [pytest.mark.django_db]

ROOT = Path(__file__).resolve().parents[2]


def files_server(tmp_path: Path | None = None, **options: object) -> MCPServer:
    env = {"MCP_HIDDEN": str(tmp_path / "hidden")} if tmp_path is not None else None
    return MCPServer.stdio([sys.executable, "-m", "tests.mcp_files_server"], cwd=str(ROOT),
                           env=env, name="files", **options)


def offered(request: ModelRequest) -> list[str]:
    return sorted(t.name for t in request.tools)


def result_of(request: ModelRequest) -> tuple[bool, object]:
    message = request.messages[-1]
    assert message.role == "tool"
    (result,) = message.tool_results
    return result.is_error, result.content


def one_call(name: str, **arguments: object):
    """The model: call ``name`` once, then reply with what it read."""
    def respond(request: ModelRequest) -> object:
        if request.messages[-1].role == "tool":
            is_error, content = result_of(request)
            return reply(f"error={is_error}: {content}")
        return call(name, id="call_1", **arguments)
    return respond


def test_only_allowed_tools_are_offered_and_a_result_reaches_the_transcript():
    client = FunctionClient(one_call("read", path="notes.txt"))
    agent = Agent("mcp-reader", tools=[files_server(allow=["read", "search"])], client=client)
    run = agent.run("read my notes")
    assert run.status == "completed", run.error
    assert offered(client.requests[0]) == ["read", "search"]
    assert offered(client.requests[1]) == ["read", "search"]
    assert result_of(client.requests[1]) == (False, "buy milk")
    assert run.output_text == "error=False: buy milk"
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert (execution.tool_name, execution.status) == ("read", "completed")


def test_a_prefix_names_the_offered_tools_and_calls_the_servers_name():
    client = FunctionClient(one_call("files_search", text="milk"))
    agent = Agent("mcp-prefixed", tools=[files_server(allow=["search"], prefix="files_")],
                  client=client)
    run = agent.run("find milk")
    assert run.status == "completed", run.error
    assert offered(client.requests[0]) == ["files_search"]
    assert result_of(client.requests[1]) == (False, "notes.txt")


def test_an_mcp_error_result_is_a_tool_error_the_model_reads():
    client = FunctionClient(one_call("fail", reason="disk on fire"))
    run = Agent("mcp-failing", tools=[files_server(allow=["fail"])], client=client).run("go")
    assert run.status == "completed", run.error
    is_error, content = result_of(client.requests[1])
    assert is_error and "disk on fire" in str(content)
    assert ToolExecution.objects.get(turn_id=run.id).status == "failed"


def test_a_tool_outside_the_allow_list_is_not_callable():
    client = FunctionClient(one_call("delete", path="notes.txt"))
    run = Agent("mcp-deleter", tools=[files_server(allow=["read"])], client=client).run("go")
    assert run.status == "completed", run.error
    is_error, content = result_of(client.requests[1])
    assert is_error and content["error"] == "unknown_tool"


def test_a_server_that_dies_mid_call_is_a_tool_error_and_the_turn_goes_on():
    client = FunctionClient(one_call("crash"))
    run = Agent("mcp-crashing", tools=[files_server(allow=["crash"])], client=client).run("go")
    assert run.status == "completed", run.error
    is_error, content = result_of(client.requests[1])
    assert is_error and "failed while calling 'crash'" in str(content)
    # Not declared replay-safe: the model is told the call's effect is unknown.
    assert "may have taken effect" in str(content)


def test_a_replay_safe_server_that_dies_mid_call_is_tried_again_with_retries(tmp_path):
    marker = str(tmp_path / "crashed-once")
    client = FunctionClient(one_call("crash_once", marker=marker))
    source = files_server(allow=["crash_once"], recovery="replay_safe", retries=2, backoff=0)
    run = Agent("mcp-retrying", tools=[source], client=client).run("go")
    assert run.status == "completed", run.error
    assert result_of(client.requests[1]) == (False, "done on a later attempt")
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.attempts == 2


def test_an_mcp_error_result_is_not_retried():
    client = FunctionClient(one_call("fail", reason="no"))
    source = files_server(allow=["fail"], recovery="replay_safe", retries=2, backoff=0)
    run = Agent("mcp-error-once", tools=[source], client=client).run("go")
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.attempts == 1
    assert result_of(client.requests[1])[0] is True


def test_a_call_past_its_timeout_is_a_tool_error():
    client = FunctionClient(one_call("hang", seconds=30))
    agent = Agent("mcp-hanging", tools=[files_server(allow=["hang"], timeout=1)], client=client)
    run = agent.run("go")
    assert run.status == "completed", run.error
    is_error, content = result_of(client.requests[1])
    assert is_error and "did not finish calling 'hang' within 1s" in str(content)


def test_a_server_that_cannot_start_offers_no_tools_and_the_turn_runs():
    client = FunctionClient(lambda request: reply("no tools: " + ",".join(offered(request))))
    source = MCPServer.stdio([sys.executable, "-c", "raise SystemExit(3)"], name="broken",
                             list_timeout=10)
    run = Agent("mcp-broken", tools=[source], client=client).run("go")
    assert run.status == "completed", run.error
    assert run.output_text == "no tools: "
    record = Turn.objects.get(pk=run.id).state["listed_tools"]["broken"]
    assert record["tools"] == [] and record["error"]


@pytest.mark.usefixtures("background", "invariants")
@pytest.mark.parametrize(("recovery", "outcome"), [("replay_safe", False), ("unknown", True)])
def test_a_resumed_turn_offers_the_recorded_tools_without_listing_again(
        registered, tmp_path, recovery, outcome):
    client = FunctionClient(one_call("read", path="todo.txt"))
    agent = registered(Agent("mcp-resumed", client=client, tools=[
        files_server(tmp_path, allow=["read", "search"], recovery=recovery)]))
    run = agent.prepare("read my todo").submit()

    def hide_search() -> None:  # from now on a new listing would not offer search
        (tmp_path / "hidden").write_text("search")
        raise SimulatedCrash("the worker died inside the call")

    # The worker dies inside the call, after the listing and the model call were recorded.
    failpoints.arm("inside_tool", hide_search)
    with pytest.raises(SimulatedCrash):
        services.run_turn(run.id, kind="test")
    expire_lease(run.id)
    assert run.id in reconcile().recovered
    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    # The resumed turn did not list again: it offers what the turn recorded.
    assert [offered(r) for r in client.requests] == [["read", "search"]] * 2
    is_error, content = result_of(client.requests[-1])
    # Replay-safe: the call runs again on the resumed turn; else its outcome is unknown.
    assert is_error is outcome
    assert outcome or content == "write tests"


def test_bad_options_are_refused_when_the_source_is_defined():
    with pytest.raises(ConfigurationError, match="argv"):
        MCPServer.stdio("python -m files_server")
    with pytest.raises(ConfigurationError, match="recovery"):
        files_server(recovery="maybe")
    with pytest.raises(ConfigurationError, match="timeout"):
        files_server(timeout=0)
    with pytest.raises(ConfigurationError, match="replay_safe"):
        files_server(retries=2)  # a retry could repeat an effect of a call that is not safe to
    with pytest.raises(ConfigurationError, match="retries"):
        files_server(recovery="replay_safe", retries=-1)
    with pytest.raises(ConfigurationError, match="url"):
        MCPServer.http("ftp://example.com/mcp")
    with pytest.raises(ConfigurationError, match="two tool sources"):
        Agent("mcp-twice", tools=[files_server(), files_server()])
