"""Pausing a turn parked for approval (issue 35, H2): the operator's pause outlives the decision.

A call parked for approval leaves its turn ``paused``. ``pause()`` on it records the operator's
pause in the turn's controls (``pause_held``); a later ``approve``/``deny`` (or the expiry)
records the decision but leaves the turn paused until ``resume()``, which then lets it run: the
approved call runs exactly once. ``resume()`` before the decision lifts the pause and the turn
waits for the decision as before; ``resume()`` of a parked turn nobody paused is refused and
changes nothing. A pause requested while the turn runs and reached by the park is held the same
way. The ledger counts the tool's effects outside turnkit's tables.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import clear, recorded
from turnkit_django import Agent, InvalidTransition, ToolContext, services, tool
from turnkit_django.models import Event, ToolExecution, Turn
from turnkit_django.services import controls
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]

ledger: list[str] = []


@pytest.fixture(autouse=True)
def _empty_ledger() -> None:
    ledger.clear()


@tool(approval=True)
def wire_money(order_id: str) -> str:
    """Wire money for an order, once a person approves."""
    ledger.append(order_id)
    return f"wired {order_id}"


def pause_then_ask(args: Any, ctx: ToolContext) -> bool:
    """An approval callable during which the operator pauses the running turn."""
    controls.pause(Turn.objects.get(pk=ctx.turn.id), principal={"staff": 1})
    return True


@tool(approval=pause_then_ask)
def wire_paused(order_id: str) -> str:
    """Wire money for an order, once a person approves (paused while it is asked)."""
    ledger.append(order_id)
    return f"wired {order_id}"


def respond(request: Any) -> Any:
    results = [p for m in request.messages if m.role == "tool" for p in m.tool_results]
    if not results:
        return call(request.tools[0].name, order_id="42")
    return reply("not wired" if results[-1].is_error else "wired")


def agent(registered: Any, name: str, tool_: Any = wire_money) -> Agent:
    return registered(Agent(name, client=FunctionClient(respond), tools=[tool_]))


def execution_of(run: Any) -> ToolExecution:
    return ToolExecution.objects.get(turn_id=run.id)


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_pause_on_a_parked_turn_holds_it_paused_through_the_decision(registered, decision):
    run = agent(registered, f"held-{decision}").run("wire it")
    assert run.status == "paused"
    call_id = execution_of(run).tool_call_id
    assert run.pause(principal={"staff": 1}).status == "paused"
    assert Turn.objects.get(pk=run.id).controls["pause_held"] is True

    getattr(run, decision)(call_id, principal={"user": 1})
    execution = execution_of(run)
    assert execution.approval["state"] == ("approved" if decision == "approve" else "denied")
    assert run.refresh().status == "paused" and ledger == []  # the decision ran nothing
    assert execution.status == "pending" and execution.attempts == 0

    run.resume(principal={"staff": 1})
    assert run.status == "completed"
    assert run.output_text == ("wired" if decision == "approve" else "not wired")
    assert ledger == (["42"] if decision == "approve" else [])
    assert "pause_held" not in Turn.objects.get(pk=run.id).controls


def test_a_held_background_turn_is_dispatched_by_resume_not_by_the_approval(
        registered, django_capture_on_commit_callbacks):
    run = agent(registered, "held-background").submit("wire it")
    assert services.run_turn(run.id) and run.refresh().status == "paused"
    run.pause()
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        run.approve(execution_of(run).tool_call_id)
    assert recorded() == [] and services.run_turn(run.id) is False
    assert run.refresh().status == "paused" and ledger == []

    with django_capture_on_commit_callbacks(execute=True):
        run.resume()
    assert recorded() == [run.id]
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed" and ledger == ["42"]
    assert services.run_turn(run.id) is False and ledger == ["42"]  # exactly once


def test_resume_before_the_decision_lifts_the_pause_and_the_turn_waits_for_it(registered):
    run = agent(registered, "lifted").run("wire it")
    run.pause()
    assert run.resume().status == "paused"  # still waiting for the person
    assert "pause_held" not in Turn.objects.get(pk=run.id).controls
    run.approve(execution_of(run).tool_call_id)
    assert run.status == "completed" and ledger == ["42"]


def test_resume_of_a_parked_turn_nobody_paused_is_refused_and_changes_nothing(registered):
    run = agent(registered, "not-paused").run("wire it")
    before = Turn.objects.get(pk=run.id)
    events = Event.objects.filter(root_turn_id=run.id).count()
    with pytest.raises(InvalidTransition, match="waiting for an approval"):
        run.resume()
    after = Turn.objects.get(pk=run.id)
    assert (after.status, after.controls, after.deadline_at) == (
        before.status, before.controls, before.deadline_at)
    assert Event.objects.filter(root_turn_id=run.id).count() == events
    assert execution_of(run).approval["state"] == "requested" and ledger == []


def test_a_pause_requested_while_running_is_held_when_the_turn_parks(registered):
    run = agent(registered, "paused-while-asked", wire_paused).run("wire it")
    assert run.status == "paused"
    assert Turn.objects.get(pk=run.id).controls.get("pause_held") is True
    run.approve(execution_of(run).tool_call_id)
    assert run.refresh().status == "paused" and ledger == []
    run.resume()
    assert run.status == "completed" and ledger == ["42"]
