"""A background child's own limits (docs/specialists.md, "As sub-agents"), on the step's fast
path: the child's counts live in its own state, written by its fenced steps, and its own limit
refuses it like the tree's ledger refuses a root.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import ping, ping_six_times, pings
from turnkit_django import Agent, services
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.store.limits import ITERATIONS, TOOL_EXECUTIONS
from turnkit_django.testing import FunctionClient, call, reply

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

BY_NAME = "maximum executions reached for tool 'ping'"


@pytest.fixture(autouse=True)
def _clear() -> None:
    pings.clear()


def lead(registered: Any, *subs: Agent, first: Any, **options: Any) -> Agent:
    def respond(request: Any) -> Any:
        return reply("lead done") if request.messages[-1].role == "tool" else first
    return registered(Agent("lead", sub_agents=list(subs), client=FunctionClient(respond),
                            **options))


@pytest.mark.parametrize(("limit", "ran", "reason"), [
    ({"max_tool_executions": 1}, 1, TOOL_EXECUTIONS),
    ({"max_iterations": 2}, 2, ITERATIONS),
    ({"max_tool_executions_by_name": {"ping": 1}}, 1, BY_NAME),
])
def test_a_background_child_stops_at_its_own_limit(limit, ran, reason, registered,
                                                    django_capture_on_commit_callbacks):
    kid = Agent("kid", tools=[ping], client=FunctionClient(ping_six_times), **limit)
    agent = lead(registered, kid, first=call("kid", task="ping six times"))
    run = agent.submit("go")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(run.id)
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)

    child.refresh_from_db()
    assert (child.status, child.error["reason"]) == ("failed", reason)
    assert len(pings) == ran
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(run.id)
    parent = Turn.objects.get(pk=run.id)
    assert (parent.status, parent.output_text) == ("completed", "lead done")
    delegation = ToolExecution.objects.get(turn_id=run.id, tool_name="kid")
    assert (delegation.status, delegation.error["error"]["reason"]) == ("failed", reason)


def test_a_middle_agents_own_limit_bounds_its_fan_out(registered,
                                                      django_capture_on_commit_callbacks):
    """A child that delegates in the background spends its own tool slots on delegations."""
    leaf = Agent("leaf", client=FunctionClient(lambda request: reply("leaf done")))
    middle = Agent("middle", sub_agents=[leaf], max_tool_executions=1, client=FunctionClient(
        lambda request: reply("middle done") if request.messages[-1].role == "tool" else [
            call("leaf", id="call_a", task="a"), call("leaf", id="call_b", task="b")]))
    agent = lead(registered, middle, first=call("middle", task="fan out twice"))
    run = agent.submit("go")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(run.id)
    (mid,) = Turn.objects.filter(parent_turn_id=run.id)
    with django_capture_on_commit_callbacks(execute=True):
        services.run_turn(mid.pk)

    mid.refresh_from_db()
    assert (mid.status, mid.error["reason"]) == ("failed", TOOL_EXECUTIONS)
    assert Turn.objects.filter(parent_turn_id=mid.pk).count() == 1  # the second was refused
    assert mid.state["tool_executions"] == 1
