"""Tool policies (issue 16; TurnKit 0.8.0 ``tool_policy``): the agent's own rule about each call.

``Agent(tool_policy=callable)`` is asked before every tool execution, after the authorization
policy and argument validation, with no transaction open. ``"allow"`` or None runs the call;
``("block", reason)`` gives it a failed result with the reason and ``tool_policy_blocked`` (the
model reads it); anything else is a failed result naming the contract.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from pydantic import BaseModel

from tests.dispatch import override_turnkit
from turnkit_django import Agent, ConfigurationError, SubAgentTool, ToolCall, services, tool
from turnkit_django.testing import ScriptedClient, call, reply
from turnkit_django.tools import send_message

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

read: list[str] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    read.clear()


@tool
def read_file(path: str, lines: int = 0) -> str:
    """Read a file (lines=0: all of it)."""
    read.append(path)
    return f"contents of {path}"


def no_full_reads(call: ToolCall) -> Any:
    if call.name == "read_file" and call.args.lines == 0:  # type: ignore[attr-defined]
        return ("block", "Read at most 300 lines at a time: pass lines=300.")
    return "allow"


def run_with(policy: Any, *calls: Any, **options: Any) -> tuple[Any, ScriptedClient]:
    client = ScriptedClient([list(calls), reply("done")])
    agent = Agent("reader", tools=[read_file], tool_policy=policy, client=client, **options)
    return agent.run("read it", principal={"user": 7}, context={"repo": "core"}), client


def results(client: ScriptedClient) -> list[Any]:
    """The results the model read for its calls: a failed result's content, or "ok"."""
    messages = client.requests[1].messages
    last = max(i for i, m in enumerate(messages) if m.role == "assistant")
    return [r.content if r.is_error else "ok" for m in messages[last + 1:]
            for r in m.tool_results]


def test_a_blocked_call_does_not_run_and_the_model_reads_why(valid_transcript):
    run, client = run_with(no_full_reads, call("read_file", path="a.py"),
                           call("read_file", path="b.py", lines=300))

    assert run.status == "completed", run.error
    assert read == ["b.py"]
    blocked = {"error": "tool_policy_blocked", "tool_policy_blocked": True,
               "message": "Read at most 300 lines at a time: pass lines=300."}
    assert results(client) == [blocked, "ok"]
    first, second = run.tool_executions()
    assert (first.status, first.error) == ("failed", blocked)
    assert second.status == "completed"
    valid_transcript(run.conversation_id)


@pytest.mark.parametrize("verdict", [None, "allow"])
def test_allow_and_none_let_the_call_run(verdict):
    run, _ = run_with(lambda c: verdict, call("read_file", path="a.py"))
    assert run.status == "completed" and read == ["a.py"]


@pytest.mark.parametrize("verdict", [False, "deny", ("block",), ("block", ""), ["nope", "x"], 0])
def test_any_other_answer_fails_the_call_naming_the_contract(verdict):
    run, client = run_with(lambda c: verdict, call("read_file", path="a.py"))

    assert run.status == "completed" and read == []
    (content,) = results(client)
    assert content["error"] == "tool_policy_error"
    assert "must return 'allow', None or ('block', reason)" in content["message"]
    assert "tool_policy_blocked" not in content


def test_a_policy_that_raises_fails_the_call():
    def broken(call: ToolCall) -> Any:
        raise LookupError("no rule for this tool")

    _run, client = run_with(broken, call("read_file", path="a.py"))
    (content,) = results(client)
    assert read == [] and content["error"] == "tool_policy_error"
    assert "LookupError: no rule for this tool" in content["message"]


@pytest.mark.django_db(transaction=True)
def test_the_policy_gets_the_call_and_its_context_with_no_transaction_open():
    seen: list[tuple[Any, ...]] = []

    def record(call: ToolCall) -> None:
        seen.append((call.name, call.arguments, call.args.model_dump(), call.principal,
                     call.context, call.turn.id, call.tool is read_file,
                     connection.in_atomic_block))

    run, _client = run_with(record, call("read_file", path="a.py", id="call_1"))

    assert seen == [("read_file", {"path": "a.py"}, {"path": "a.py", "lines": 0}, {"user": 7},
                     {"repo": "core"}, run.id, True, False)]


def test_it_is_asked_after_authorization_and_validation():
    asked: list[str] = []

    def policy(action: str, principal: Any, **resources: Any) -> bool:
        return resources.get("arguments", {}).get("path") != "secret.py"

    with override_turnkit(AUTHORIZATION_POLICY=policy):
        _run, client = run_with(lambda c: asked.append(c.arguments["path"]),
                               call("read_file", path="secret.py"),
                               call("read_file", path="a.py", lines="many"),
                               call("read_file", path="b.py"))

    assert [r["error"] if r != "ok" else r for r in results(client)] == [
        "not_authorized", "invalid_arguments", "ok"]
    assert asked == ["b.py"]  # never for a refused or invalid call


def test_it_is_asked_for_sub_agents_and_coordination_tools_too():
    class Args(BaseModel):
        topic: str

    helper = Agent("helper", client=ScriptedClient([reply("helped")]))
    asked: list[str] = []

    def block_all(call: ToolCall) -> Any:
        asked.append(call.name)
        return ("block", f"{call.name} is off today")

    tools = [read_file, send_message,
             SubAgentTool(helper, name="ask_helper", args=Args, task="About {topic}")]
    client = ScriptedClient([[call("helper", task="x"), call("ask_helper", topic="y"),
                              call("send_message", conversation_id="conv_x", text="hi")],
                             reply("done")])
    run = Agent("lead", tools=tools, sub_agents=[helper], tool_policy=block_all,
                client=client).run("go")

    assert run.status == "completed", run.error
    assert asked == ["helper", "ask_helper", "send_message"]
    assert all(r["tool_policy_blocked"] for r in results(client))
    assert run.turns().count() == 1  # no child was created


def test_a_tool_policy_must_be_callable():
    with pytest.raises(ConfigurationError, match="tool_policy must be a callable"):
        Agent("reader", tools=[read_file], tool_policy="allow")


@pytest.mark.usefixtures("background")
def test_a_background_turn_asks_the_policy_before_each_call_and_before_a_fan_out(
        registered, django_capture_on_commit_callbacks):
    helper = Agent("bg_helper", client=ScriptedClient([]))

    def policy(call: ToolCall) -> Any:
        return ("block", "no delegation") if call.name == "bg_helper" else None

    client = ScriptedClient([[call("bg_helper", task="x"), call("read_file", path="a.py")],
                             reply("done")])
    agent = registered(Agent("bg_reader", tools=[read_file], sub_agents=[helper],
                             tool_policy=policy, client=client))
    run = agent.submit("go")
    with django_capture_on_commit_callbacks(execute=True):
        services.run_turn(run.id)

    run.refresh()
    assert run.status == "completed", run.error
    assert results(client)[0]["tool_policy_blocked"] and results(client)[1] == "ok"
    assert read == ["a.py"] and run.turns().count() == 1
