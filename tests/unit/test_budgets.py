"""Root-wide budgets (issue 2, done-when 5; architecture section 10).

Each limit stops the loop with its reason, recorded as ``run.error["reason"]`` and
``run.error["limit"]``; one ledger is shared by a parent and its inline sub-agents. Scripts are
exact: a loop that went on past its limit would exhaust its script and fail for another reason.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from tests.dispatch import override_turnkit
from turnkit_django import Agent, tool
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.store.limits import DEPTH, ITERATIONS, SPEND, TIMEOUT, TOOL_EXECUTIONS
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

#: One input token costs one dollar on this model, so spend counts model calls.
PRICED = "priced-model"
RATES = {PRICED: {"input": "1000000", "output": "0"}}
ONE_DOLLAR = {"input_tokens": 1, "output_tokens": 0}
BY_NAME = "maximum executions reached for tool 'lookup'"

lookups: list[str] = []


@pytest.fixture(autouse=True)
def _priced() -> Any:
    lookups.clear()
    with override_turnkit(COST_RATES=RATES):
        yield


@tool
def lookup(key: str) -> str:
    """Look a key up."""
    lookups.append(key)
    return f"value of {key}"


@tool
def note() -> str:
    """Take a note (no per-name limit)."""
    return "noted"


@tool
def pass_deadline(ctx) -> str:
    """Let the tree's deadline pass (the clock moves; the test moves the deadline instead)."""
    root = Turn.objects.get(pk=ctx.turn.id).root_turn_id
    Turn.objects.filter(pk=root).update(deadline_at=timezone.now() - timedelta(seconds=1))
    return "time flies"


def lookup_forever(request: Any) -> Any:
    return call("lookup", key=f"k{len(request.messages)}", usage=ONE_DOLLAR)


def agent(name: str = "worker", script: Any = None, **options: Any) -> Agent:
    client = FunctionClient(lookup_forever) if script is None else ScriptedClient(script)
    options.setdefault("tools", [lookup, pass_deadline])
    return Agent(name, model=PRICED, client=client, **options)


def assert_stopped(run: Any, reason: str, limit: str) -> None:
    assert run.status == "failed", run.error
    assert (run.error["type"], run.error["reason"], run.error["limit"]) == (
        "BudgetExceeded", reason, limit)


# --------------------------------------------------------------------------- each limit


def test_max_iterations_stops_the_loop(valid_transcript):
    worker = agent(max_iterations=3)
    run = worker.run("look everything up")
    assert_stopped(run, ITERATIONS, "max_iterations")
    assert run.error["reason"] == "maximum iterations reached"
    assert len(worker.client.requests) == 3
    assert lookups == ["k1", "k3", "k5"]
    assert valid_transcript(run.conversation_id).count(("assistant", "tool_call")) == 3


def test_max_tool_executions_stops_the_loop_and_answers_every_call(valid_transcript):
    batch = [call("lookup", key=k, usage=ONE_DOLLAR) for k in ("b1", "b2", "b3", "b4")]
    worker = agent(max_tool_executions=3, script=[call("lookup", key="a"), batch])
    run = worker.run("look up a lot")
    assert_stopped(run, TOOL_EXECUTIONS, "max_tool_executions")
    assert lookups == ["a", "b1", "b2"]
    statuses = list(run.tool_executions().values_list("status", "budget_denied"))
    # b3 is denied with a result the model could read; b4 is answered "not executed".
    assert statuses == [("completed", False)] * 3 + [("failed", True), ("cancelled", False)]
    denied = run.tool_executions().get(budget_denied=True)
    assert denied.error == {"error": "budget_exceeded", "message": TOOL_EXECUTIONS}
    assert worker.client.remaining == 0
    valid_transcript(run.conversation_id)


def test_max_tool_executions_by_name_stops_the_loop(valid_transcript):
    counted = agent(
        max_tool_executions_by_name={"lookup": 2},
        script=[call("lookup", key="1"), call("note"), call("lookup", key="2"),
                call("note"), call("lookup", key="3")],
        tools=[lookup, note],
    )
    run = counted.run("look up three")
    assert_stopped(run, BY_NAME, "max_tool_executions_by_name")
    assert lookups == ["1", "2"]
    assert counted.client.remaining == 0
    valid_transcript(run.conversation_id)


def test_max_spend_stops_the_loop_on_observed_cost(valid_transcript):
    worker = agent(max_spend="1.5")
    run = worker.run("spend")
    assert_stopped(run, SPEND, "max_spend")
    assert run.error["reason"] == "cost limit reached"
    # $1 then $2: the second response overshoots, and nothing runs after it.
    assert len(worker.client.requests) == 2
    assert lookups == ["k1"]
    assert run.cost == Decimal(2)
    assert Turn.objects.get(pk=run.id).tree_spend == Decimal(2)
    valid_transcript(run.conversation_id)


def test_max_depth_stops_delegation_before_the_child_exists(valid_transcript):
    helper = agent("helper", script=[reply("never asked")])
    lead = agent("lead", sub_agents=[helper], max_depth=0,
                 script=[call("helper", task="help")])
    run = lead.run("delegate")
    assert_stopped(run, DEPTH, "max_depth")
    assert run.turns().count() == 1
    assert helper.client.requests == []
    execution = run.tool_executions().get()
    assert execution.error == {"error": "budget_exceeded", "message": DEPTH}
    valid_transcript(run.conversation_id)


def test_max_depth_applies_to_nested_sub_agents():
    leaf = agent("leaf", script=[reply("never asked")])
    middle = agent("middle", sub_agents=[leaf], script=[call("leaf", task="deeper")])
    lead = agent("lead", sub_agents=[middle], max_depth=1,
                 script=[call("middle", task="help"), reply("the helper could not")])
    run = lead.run("delegate twice")
    assert run.status == "completed", run.error  # a failed child is a result, not a failure
    child = run.turns().get(depth=1)
    assert (child.status, child.error["reason"], child.error["limit"]) == (
        "failed", DEPTH, "max_depth")
    assert not run.turns().filter(depth=2).exists()
    assert leaf.client.requests == []
    envelope = ToolExecution.objects.get(turn_id=run.id).error
    assert envelope["status"] == "failed" and envelope["error"]["reason"] == DEPTH


def test_timeout_stops_the_loop_once_the_deadline_passed(valid_transcript):
    worker = agent(timeout=30, script=[call("pass_deadline"), reply("too late")])
    run = worker.run("hurry")
    assert_stopped(run, TIMEOUT, "timeout")
    assert run.error["reason"] == "turn timed out"
    assert len(worker.client.requests) == 1
    valid_transcript(run.conversation_id)


def test_the_timeout_deadline_is_set_when_the_run_starts():
    seen: list[Any] = []

    @tool
    def clock(ctx) -> str:
        """Read the deadline."""
        seen.append(Turn.objects.values_list("started_at", "deadline_at").get(pk=ctx.turn.id))
        return "ok"

    run = agent(timeout=30, tools=[clock], script=[call("clock"), reply("ok")]).run("time")
    assert run.status == "completed", run.error
    ((started, deadline),) = seen
    assert timedelta(seconds=29) < deadline - started <= timedelta(seconds=31)


# --------------------------------------------------------------------------- shared


SHARED = {
    # limit: (root limits, parent script, child script, child's reason, parent's reason)
    "max_iterations": (
        {"max_iterations": 3},
        [call("helper", task="t", usage=ONE_DOLLAR)],
        [call("lookup", key="c"), reply("child done")],
        None, ITERATIONS,
    ),
    "max_tool_executions": (
        {"max_tool_executions": 2},
        [call("helper", task="t"), call("lookup", key="p")],
        [call("lookup", key="c1"), call("lookup", key="c2")],
        TOOL_EXECUTIONS, TOOL_EXECUTIONS,
    ),
    "max_tool_executions_by_name": (
        {"max_tool_executions_by_name": {"lookup": 1}},
        [call("lookup", key="p"), call("helper", task="t")],
        [call("lookup", key="c")],
        BY_NAME, None,
    ),
    "max_spend": (
        {"max_spend": "1.5"},
        [call("helper", task="t", usage=ONE_DOLLAR)],
        [reply("child done", usage=ONE_DOLLAR)],
        None, SPEND,
    ),
    "timeout": (
        {"timeout": 60},
        [call("helper", task="t")],
        [call("pass_deadline")],
        TIMEOUT, TIMEOUT,
    ),
}


@pytest.mark.parametrize("limit", sorted(SHARED))
def test_limits_are_shared_by_a_parent_and_its_inline_sub_agents(limit, valid_transcript):
    limits, parent_script, child_script, child_reason, parent_reason = SHARED[limit]
    helper = agent("helper", script=child_script, max_iterations=50, max_tool_executions=50)
    lead = agent("lead", sub_agents=[helper], script=[*parent_script, reply("parent done")],
                 **limits)
    run = lead.run("share the budget")

    child = run.turns().get(depth=1)
    if child_reason is None:
        assert child.status == "completed", child.error
    else:
        assert (child.status, child.error["reason"]) == ("failed", child_reason)
    if parent_reason is None:
        assert run.status == "completed", run.error
        assert lead.client.remaining == 0
    else:
        assert (run.status, run.error["reason"]) == ("failed", parent_reason)
        assert lead.client.remaining == 1  # the parent never got to its last response
    assert helper.client.remaining == 0  # the child's limits (50) are not the ones that count
    for conversation_id in run.turns().values_list("conversation_id", flat=True):
        valid_transcript(conversation_id)
