"""``launch_agent`` is asked with the agent a typed sub-agent tool starts, not the tool's name.

authorization.md gives the action the resource ``agent``; a typed tool (``SubAgentTool(reviewer,
name="review_file")``) starts the agent ``reviewer``. Asked with the tool's name, a policy that
refuses ``reviewer`` for a principal would let the model start it through any typed tool.
"""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import BaseModel

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import policy, policy_calls
from turnkit_django import Agent, SubAgentTool, services
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


class ReviewArgs(BaseModel):
    path: str


def lead(registered: Any) -> Agent:
    reviewer = Agent("reviewer", description="Reviews one file.",
                     client=FunctionClient(lambda request: reply("reviewed")))
    review_file = SubAgentTool(reviewer, name="review_file", description="Have a file reviewed.",
                               args=ReviewArgs, task="Review {path}.")
    return registered(Agent("lead", tools=[review_file], client=ScriptedClient(
        [call("review_file", id="call_review", path="a.py"), reply("done")])))


def launches(calls: list[tuple[str, Any, dict[str, Any]]]) -> list[Any]:
    return [resources["agent"] for action, _, resources in calls if action == "launch_agent"]


def test_an_inline_typed_delegation_is_authorized_for_its_agent(registered, policy_calls):
    with policy("tests.orchestration.allow"):
        run = lead(registered).run("review")
    assert run.status == "completed"
    assert launches(policy_calls) == ["reviewer"]


def test_a_background_typed_delegation_is_authorized_for_its_agent(registered, policy_calls):
    run = lead(registered).submit("review")
    with policy("tests.orchestration.allow"):
        assert services.run_turn(run.id)
    assert Turn.objects.filter(parent_turn_id=run.id, agent_name="reviewer").exists()
    assert launches(policy_calls) == ["reviewer"]
