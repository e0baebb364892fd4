"""A sub-agent's own limits (docs/specialists.md, "As sub-agents"; architecture section 10).

The tree's ledger bounds the whole run; an agent's own ``max_iterations``,
``max_tool_executions`` and ``max_tool_executions_by_name`` also bound each turn it runs as a
child, counted on that turn alone. A child past its own limit fails with ``BudgetExceeded``,
and its parent reads the failure as a structured tool result and goes on.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.orchestration import ping, ping_six_times, pings
from turnkit_django import Agent
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.store.limits import ITERATIONS, TOOL_EXECUTIONS
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


@pytest.fixture(autouse=True)
def _clear() -> None:
    pings.clear()


def boss_respond(request: Any) -> Any:
    if request.last_message_is_tool_result():
        return reply("boss done")
    return call("kid", task="ping six times")


BY_NAME = "maximum executions reached for tool 'ping'"
CASES = {
    "max_tool_executions": ({"max_tool_executions": 1}, 1, TOOL_EXECUTIONS),
    "max_iterations": ({"max_iterations": 2}, 2, ITERATIONS),
    "max_tool_executions_by_name": ({"max_tool_executions_by_name": {"ping": 1}}, 1, BY_NAME),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_an_inline_child_stops_at_its_own_limit(case, valid_transcript):
    limit, ran, reason = CASES[case]
    kid = Agent("kid", tools=[ping], client=FunctionClient(ping_six_times), **limit)
    boss = Agent("boss", sub_agents=[kid], client=FunctionClient(boss_respond))
    run = boss.run("go")

    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert (child.status, child.error["type"], child.error["reason"]) == (
        "failed", "BudgetExceeded", reason)
    assert len(pings) == ran
    # The parent read the failure as its tool's result and finished.
    assert (run.status, run.output_text) == ("completed", "boss done")
    delegation = ToolExecution.objects.get(turn_id=run.id, tool_name="kid")
    assert delegation.status == "failed"
    assert delegation.error["error"]["reason"] == reason  # the child's envelope
    for conversation_id in run.turns().values_list("conversation_id", flat=True):
        valid_transcript(conversation_id)


def test_a_childs_own_limits_count_its_own_calls_only():
    """Two children of one agent each get the agent's limit: the count is per turn."""
    kid = Agent("kid", tools=[ping], client=FunctionClient(ping_six_times),
                max_tool_executions=2)
    calls = iter([call("kid", task="first"), call("kid", task="second")])
    boss = Agent("boss", sub_agents=[kid], client=FunctionClient(
        lambda request: next(calls, reply("boss done"))))
    run = boss.run("go")

    children = Turn.objects.filter(parent_turn_id=run.id).order_by("created_at")
    assert [c.status for c in children] == ["failed", "failed"]
    assert len(pings) == 4
    assert run.status == "completed", run.error


def test_a_root_keeps_its_limits_in_the_tree_ledger_only():
    kid = Agent("kid", tools=[ping], client=FunctionClient(ping_six_times),
                max_tool_executions=1)
    run = kid.run("go")
    assert (run.status, run.error["reason"]) == ("failed", TOOL_EXECUTIONS)
    row = Turn.objects.get(pk=run.id)
    assert "own_limits" not in row.options
    assert len(pings) == 1


def test_a_child_without_own_limits_records_none():
    kid = Agent("kid", tools=[ping], client=FunctionClient(ping_six_times))
    boss = Agent("boss", sub_agents=[kid], client=FunctionClient(boss_respond))
    run = boss.run("go")
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert child.status == "completed", child.error
    assert "own_limits" not in child.options
    assert "tool_executions" not in child.state
    assert len(pings) == 6
