"""A pause requested while a launch is authorized stops the launch (TurnKit scenario 63).

The application pauses a running turn while the authorization policy decides on its
``launch_agent`` call (or an inline sub-agent's launch). The transaction that would create the
child reads the turn's pending controls under the tree lock: the child is not created, the call's
intent goes back to ``pending`` with its attempt undone, and the turn pauses at that step
boundary. ``resume()`` then launches exactly one child, which runs, and the parent completes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import override_turnkit
from tests.orchestration import scripted
from turnkit_django import Agent, services
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.services import controls
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import launch_agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]

asked: list[str] = []
pauses = {"left": 1}


def pause_when_launching(action: str, *, principal: Any = None, **resources: Any) -> bool:
    """Allow everything; asked about a launch, the operator pauses the turn first (as often
    as ``pauses`` says)."""
    if action == "launch_agent":
        asked.append(action)
        if pauses["left"]:
            pauses["left"] -= 1
            controls.pause(Turn.objects.get(pk=resources["turn_id"]), principal={"staff": 1})
    return True


@pytest.fixture(autouse=True)
def _policy() -> Any:
    asked.clear()
    pauses["left"] = 1
    with override_turnkit(AUTHORIZATION_POLICY=pause_when_launching):
        yield


def helper() -> Agent:
    return Agent("helper", description="Helps.",
                 client=FunctionClient(lambda request: reply("helped")))


def test_a_pause_while_launch_agent_is_authorized_pauses_before_the_child(registered):
    parent = registered(Agent("launcher", tools=[launch_agent], sub_agents=[helper()],
                              client=FunctionClient(scripted(
                                  call("launch_agent", id="c1", agent="helper", task="help"),
                                  reply("launched")))))
    run = parent.submit("launch one")
    assert services.run_turn(run.id)

    assert asked == ["launch_agent"]
    assert run.refresh().status == "paused"
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()  # nothing launched
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert (execution.status, execution.attempts) == ("pending", 0)  # uncounted

    run.resume(principal={"staff": 1})
    assert services.run_turn(run.id)
    assert asked == ["launch_agent"] * 2
    assert run.refresh().status == "completed", run.error
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)
    assert Turn.objects.get(pk=child.pk).status == "completed"
    execution.refresh_from_db()
    assert (execution.status, execution.attempts) == ("completed", 1)
    assert Turn.objects.filter(parent_turn_id=run.id).count() == 1


def test_a_pause_while_an_inline_sub_agent_is_authorized_pauses_before_the_child(registered):
    parent = registered(Agent("delegator", sub_agents=[helper()], client=FunctionClient(
        scripted(call("helper", id="c1", task="help"), reply("delegated")))))
    run = parent.run("delegate")

    assert asked == ["launch_agent"]
    assert run.status == "paused"
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()
    assert ToolExecution.objects.get(turn_id=run.id).status == "pending"

    run.resume(principal={"staff": 1})
    assert run.status == "completed", run.error
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert child.status == "completed" and child.output_text == "helped"


def test_a_launch_started_again_after_a_pause_pauses_again_uncounted(registered):
    pauses["left"] = 2
    parent = registered(Agent("launcher", tools=[launch_agent], sub_agents=[helper()],
                              client=FunctionClient(scripted(
                                  call("launch_agent", id="c1", agent="helper", task="help"),
                                  reply("launched")))))
    run = parent.submit("launch one")
    assert services.run_turn(run.id) and run.refresh().status == "paused"
    run.resume(principal={"staff": 1})
    assert services.run_turn(run.id) and run.refresh().status == "paused"
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert (execution.status, execution.attempts) == ("pending", 0)
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()

    run.resume(principal={"staff": 1})
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed", run.error
    assert Turn.objects.filter(parent_turn_id=run.id).count() == 1
    execution.refresh_from_db()
    assert (execution.status, execution.attempts) == ("completed", 1)


def test_a_pause_while_a_background_delegation_is_authorized_pauses_before_the_child(
        registered):
    parent = registered(Agent("fanner", sub_agents=[helper()], client=FunctionClient(
        scripted(call("helper", id="c1", task="help"), reply("joined")))))
    run = parent.submit("delegate")
    assert services.run_turn(run.id) and run.refresh().status == "paused"
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()
    assert not ToolExecution.objects.filter(turn_id=run.id).exists()  # rolled back with it

    run.resume(principal={"staff": 1})
    assert services.run_turn(run.id) and run.refresh().status == "waiting"
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)
    services.drain()
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed", run.error
    assert Turn.objects.filter(parent_turn_id=run.id).count() == 1
