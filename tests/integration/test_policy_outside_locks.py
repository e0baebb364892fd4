"""The authorization policy is never called inside a transaction or under a lock (issue 10,
item 8).

A policy may be slow (it may call another service); called under the tree lock it would hold
every lock of the tree for as long. Each test runs with real commits (``transaction=True``) and
a policy that records, for every call, whether a transaction was open.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection

from tests.dispatch import override_turnkit
from tests.helpers import crash
from tests.orchestration import answering
from turnkit_django import Agent, reconcile, services
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import launch_agent, send_message

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

seen: list[tuple[str, bool]] = []


def watching(action: str, *, principal: Any, **resources: Any) -> bool:
    """Allow everything; remember whether a transaction was open when asked."""
    seen.append((action, connection.in_atomic_block))
    return True


@pytest.fixture(autouse=True)
def _policy() -> Any:
    seen.clear()
    with override_turnkit(AUTHORIZATION_POLICY="tests.integration.test_policy_outside_locks."
                                               "watching"):
        yield
    seen.clear()


def inside() -> list[str]:
    return [action for action, in_transaction in seen if in_transaction]


def test_a_cascade_cancel_asks_the_policy_outside_its_transaction():
    parent = answering("parent").prepare("p").submit()
    child = services.new_turn(answering("child"), parent=parent.row, principal=None)
    services.submit(child, callback=parent.row.conversation)
    services.cancel(parent.id, cascade=True, principal={"user": 1})
    assert {"cancel", "callback"} <= {action for action, _ in seen}
    assert inside() == []


def test_completion_callbacks_and_coordination_tools_ask_outside_transactions(registered):
    helper = Agent("helper", client=FunctionClient(lambda request: reply("helped")))

    def respond(request: Any) -> Any:
        done = [r.tool_call_id for m in request.messages for r in m.tool_results]
        if not done:
            return call("launch_agent", id="call_launch", agent="helper", task="t",
                        callback=True)
        if len(done) == 1:
            return call("send_message", id="call_send", text="hi",
                        conversation_id=request.metadata["conversation_id"])
        return reply("done")

    agent = registered(Agent("coordinator", tools=[launch_agent, send_message],
                             sub_agents=[helper], client=FunctionClient(respond)))
    listener = answering("listener").conversation()
    run = agent.prepare("go", principal={"user": 1}).submit(callback=listener)
    registered(helper)
    assert services.run_turn(run.id)
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)
    assert {"launch_agent", "callback", "send_message"} <= {action for action, _ in seen}
    assert inside() == []


def test_a_background_fan_out_asks_for_its_waits_outside_transactions(registered):
    writer = Agent("writer", client=FunctionClient(lambda request: reply("drafted")))
    agent = registered(Agent("editor", sub_agents=[writer], client=FunctionClient(
        lambda request: reply("ok") if request.last_message_is_tool_result()
        else call("writer", task="draft"))))
    run = agent.submit("go")
    assert services.run_turn(run.id)
    assert {"tool", "launch_agent", "wait"} <= {action for action, _ in seen}
    assert inside() == []


def test_a_dead_letter_asks_for_its_callback_outside_transactions(registered):
    agent = registered(Agent("doomed", client=FunctionClient(lambda request: reply("x"))))
    listener = answering("listener2").conversation()
    run = agent.prepare("go").submit(callback=listener)
    crash(run.id, "before_model_call")
    with override_turnkit(AUTHORIZATION_POLICY="tests.integration.test_policy_outside_locks."
                                               "watching", MAX_RECOVERY_ATTEMPTS=0):
        seen.clear()
        report = reconcile()
    assert report.dead_lettered == [run.id]
    assert ("callback", False) in seen and inside() == []
