"""Every application entry point that acts for a principal: a refusal writes nothing.

With a policy that refuses everything, each call raises AuthorizationError and leaves every
turnkit table as it was (no row added, changed or removed), sends no signal and registers no
on-commit work (no dispatch, no delivery). And the policy is asked only the actions the
authorization guide documents.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.apps import apps

from tests.dispatch import override_turnkit
from tests.unit.test_approval_inbox import refund, respond
from turnkit_django import Agent, AuthorizationError, pending_approvals, services
from turnkit_django.events import event
from turnkit_django.runtime.authorization import ACTIONS
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

OWNER = {"tenant": "acme", "user": 1}
INTRUDER = {"tenant": "globex", "user": 2}
POLICY = "tests.unit.test_refusals_write_nothing.refuse"
GUIDE = Path(__file__).parents[2] / "docs" / "howto" / "authorization.md"
#: The actions the table of the authorization guide documents.
DOCUMENTED = {name for cell in re.findall(r"^\| (`[^|]+) \|", GUIDE.read_text(), re.MULTILINE)
              for name in re.findall(r"`(\w+)`", cell)}
asked: list[tuple[str, Any, dict[str, Any]]] = []


def refuse(action: str, *, principal: Any, **resources: Any) -> bool:
    asked.append((action, principal, resources))
    return False


def snapshot() -> dict[str, list[tuple[Any, ...]]]:
    """Every row of every turnkit model, as values."""
    return {model.__name__: sorted(map(repr, model.objects.values_list()))
            for model in apps.get_app_config("turnkit").get_models()}


@pytest.fixture
def world(registered: Any) -> Iterator[dict[str, Any]]:
    agent = registered(Agent("refunds", tools=[refund], client=FunctionClient(respond)))
    parked = agent.submit("refund", principal=OWNER)
    assert services.run_turn(parked.id)
    parked.refresh()
    assert parked.status == "paused"
    pending = agent.prepare("later", principal=OWNER)
    other = agent.prepare("target", principal=OWNER)
    conv = agent.conversation(principal=OWNER)
    conv.post("posted", key="p1", principal=OWNER)
    dest = agent.conversation(principal=OWNER)
    (execution,) = parked.pending_approvals()
    yield {"agent": agent, "parked": parked, "pending": pending, "other": other, "conv": conv,
           "dest": dest, "execution": execution}


CALLS: dict[str, Callable[[dict[str, Any]], Any]] = {
    "cancel": lambda w: w["parked"].cancel(principal=INTRUDER),
    "cancel_cascade": lambda w: w["parked"].cancel(cascade=True, principal=INTRUDER),
    "cancel_none": lambda w: w["parked"].cancel(),
    "wait_for": lambda w: w["pending"].wait_for(w["other"], principal=INTRUDER),
    "wait_for_default": lambda w: w["pending"].wait_for(w["other"]),
    "submit_callback": lambda w: w["pending"].submit(callback=w["conv"]),
    "agent_submit_callback": lambda w: w["agent"].submit("x", callback=w["conv"]),
    "send_message": lambda w: w["conv"].send_message(w["dest"], "hi", key="s1",
                                                     principal=INTRUDER),
    "post": lambda w: w["conv"].post("more", key="p2", principal=INTRUDER),
    "post_retry": lambda w: w["conv"].post("posted", key="p1", principal=INTRUDER),
    "messages": lambda w: w["conv"].messages(principal=INTRUDER),
    "inbox": lambda w: w["conv"].inbox(principal=INTRUDER),
    "outbox": lambda w: w["conv"].outbox(principal=INTRUDER),
    "input_status": lambda w: w["conv"].input_status("p1", principal=INTRUDER),
    "run_messages": lambda w: w["parked"].messages(principal=INTRUDER),
    "run_events": lambda w: w["parked"].events(principal=INTRUDER),
    "approve": lambda w: w["parked"].approve(w["execution"].pk, principal=INTRUDER),
    "approve_edited": lambda w: w["parked"].approve(w["execution"].pk, principal=INTRUDER,
                                                    arguments={"amount_cents": 10**6}),
    "approve_call_id": lambda w: w["parked"].approve(w["execution"].tool_call_id,
                                                     principal=INTRUDER),
    "deny": lambda w: w["parked"].deny(w["execution"].pk, principal=INTRUDER),
    "turn_approve": lambda w: w["parked"].turn.approve(w["execution"].pk, principal=INTRUDER),
    "pause": lambda w: w["pending"].pause(principal=INTRUDER),
    "pause_cascade": lambda w: w["parked"].pause(principal=INTRUDER, cascade=True),
    "resume": lambda w: w["parked"].resume(principal=INTRUDER),
    "steer": lambda w: w["parked"].steer("do it", key="k", principal=INTRUDER),
    "steer_descendants": lambda w: w["pending"].steer("do it", key="k", principal=INTRUDER,
                                                      descendants=True),
}


@pytest.mark.parametrize("name", sorted(CALLS))
def test_a_refused_call_writes_nothing(name: str, world: dict[str, Any],
                                       django_capture_on_commit_callbacks: Any) -> None:
    heard: list[Any] = []

    def listen(sender: Any, **kwargs: Any) -> None:
        heard.append(kwargs.get("event"))

    before = snapshot()
    asked.clear()
    event.connect(listen, weak=False)
    try:
        with override_turnkit(AUTHORIZATION_POLICY=POLICY), \
                django_capture_on_commit_callbacks(execute=True) as callbacks, \
                pytest.raises(AuthorizationError):
            CALLS[name](world)
    finally:
        event.disconnect(listen)
    assert snapshot() == before
    assert heard == [] and callbacks == []
    assert asked and {action for action, _p, _r in asked} <= DOCUMENTED


def test_pending_approvals_lists_nothing_the_policy_refuses(world: dict[str, Any]) -> None:
    with override_turnkit(AUTHORIZATION_POLICY=POLICY):
        asked.clear()
        assert pending_approvals(principal=INTRUDER) == []
        assert world["parked"].pending_approvals(principal=INTRUDER) == []
    assert {action for action, _p, _r in asked} == {"approve"}


def test_the_guide_documents_every_action_the_policy_is_asked() -> None:
    assert DOCUMENTED == ACTIONS


denied_turns: set[str] = set()


def refuse_turns(action: str, *, principal: Any, **resources: Any) -> bool:
    asked.append((action, principal, resources))
    return resources.get("turn_id") not in denied_turns


def parent_respond(request: Any) -> Any:
    if request.last_message_is_tool_result():
        return reply("done")
    return call("helper", task="help")


@pytest.fixture
def tree(registered: Any) -> Iterator[dict[str, Any]]:
    helper = Agent("helper", description="Helps.", client=FunctionClient(lambda r: reply("ok")))
    boss = registered(Agent("boss", sub_agents=[helper], client=FunctionClient(parent_respond)))
    run = boss.submit("delegate", principal=OWNER)
    services.run_turn(run.id)
    (child,) = [t for t in run.turns() if t.pk != run.id]
    assert child.status == "pending" and run.refresh().status == "waiting"
    denied_turns.clear()
    denied_turns.add(child.pk)
    yield {"run": run, "child": child}
    denied_turns.clear()


CASCADES: dict[str, Callable[[Any], Any]] = {
    "cancel": lambda run: run.cancel(cascade=True, principal=OWNER),
    "pause": lambda run: run.pause(cascade=True, principal=OWNER),
    "resume": lambda run: run.resume(cascade=True, principal=OWNER),
    "steer": lambda run: run.steer("shorter", key="k", descendants=True, principal=OWNER),
}


@pytest.mark.parametrize("name", sorted(CASCADES))
def test_a_cascade_refused_for_one_descendant_writes_nothing(
        name: str, tree: dict[str, Any], django_capture_on_commit_callbacks: Any) -> None:
    before = snapshot()
    asked.clear()
    with override_turnkit(AUTHORIZATION_POLICY="tests.unit.test_refusals_write_nothing."
                                               "refuse_turns"), \
            django_capture_on_commit_callbacks(execute=True) as callbacks, \
            pytest.raises(AuthorizationError):
        CASCADES[name](tree["run"])
    assert snapshot() == before and callbacks == []
    assert {r["turn_id"] for _a, _p, r in asked} >= {tree["child"].pk}


@pytest.mark.parametrize("call_id", ["call_missing", "te_missing"])
def test_a_refused_principal_cannot_probe_which_calls_a_run_made(
        call_id: str, world: dict[str, Any]) -> None:
    """An id naming no call of the run is refused like one that does, when the policy refuses
    the principal the run: the error does not tell which calls another principal's run made."""
    asked.clear()
    with override_turnkit(AUTHORIZATION_POLICY=POLICY):
        with pytest.raises(AuthorizationError):
            world["parked"].approve(call_id, principal=INTRUDER)
        with pytest.raises(AuthorizationError):
            world["parked"].turn.deny(call_id, principal=INTRUDER)
    assert {action for action, _p, _r in asked} <= {"approve", "deny"}
