"""A replayed ``launch_agent`` or ``send_message`` call reports what it did, whatever the policy
says now.

orchestration.md: "One child per tool execution: a replayed call returns the child it already
launched." The launch was authorized when the child was created; a replay after a crash that
answered "not authorized" would hide a child that runs anyway (and its turn id, which the model
needs for wait_for).
"""

from __future__ import annotations

import pytest

from tests import orchestration
from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import crash_at, policy, policy_calls, recover, tool_results
from turnkit_django import Agent, services
from turnkit_django.base import failpoints
from turnkit_django.models import Delivery, Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply
from turnkit_django.tools import launch_agent, send_message

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def test_a_launch_replayed_after_the_policy_changed_returns_its_child(registered, policy_calls):
    helper = Agent("helper", description="Helps.",
                   client=FunctionClient(lambda request: reply("helped")))
    agent = registered(Agent("coordinator", tools=[launch_agent], sub_agents=[helper],
                             client=ScriptedClient([
                                 call("launch_agent", id="call_launch", agent="helper",
                                      task="go"), reply("launched")])))
    run = agent.submit("coordinate")
    with policy("tests.orchestration.selective"):
        crash_at("after_tool_call")  # the child exists, its result is not recorded yet
        with pytest.raises(failpoints.SimulatedCrash):
            services.run_turn(run.id, kind="test")
        (child,) = Turn.objects.filter(parent_turn_id=run.id)
        recover(run.id)
        orchestration.denied_actions.add("launch_agent")  # revoked meanwhile
        assert services.run_turn(run.id)

    assert run.refresh().status == "completed"
    ((_, is_error, content),) = tool_results(run.id)
    assert not is_error and content["turn_id"] == child.pk
    assert list(Turn.objects.filter(parent_turn_id=run.id)) == [child]


def test_a_send_replayed_after_the_policy_changed_reports_the_message_it_sent(registered,
                                                                               policy_calls):
    inbox = registered(Agent("inbox_agent", client=FunctionClient(
        lambda request: reply("noted")))).conversation()
    agent = registered(Agent("sender", tools=[send_message], client=ScriptedClient([
        call("send_message", id="call_send", conversation_id=inbox.id, text="please check"),
        reply("sent")])))
    run = agent.submit("coordinate")
    with policy("tests.orchestration.selective"):
        crash_at("after_tool_call")  # sent, but the result is not recorded yet
        with pytest.raises(failpoints.SimulatedCrash):
            services.run_turn(run.id, kind="test")
        recover(run.id)
        orchestration.denied_actions.add("send_message")  # revoked meanwhile
        assert services.run_turn(run.id)

    assert run.refresh().status == "completed"
    delivery = Delivery.objects.get()
    ((_, is_error, content),) = tool_results(run.id)
    assert not is_error
    assert content == {"delivery_id": delivery.pk, "conversation_id": inbox.id,
                       "delivered": True}
    assert len(inbox.messages()) == 1  # sent once
