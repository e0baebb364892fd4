"""Cancelling background turns whose tool call waits for a person (PostgreSQL).

The call parked for approval never ran: cancelling its turn (directly, or with its ancestor by
cascade) gives it the "not executed" result, the approval becomes ``cancelled`` with its
durable ``approval.cancelled`` event, a later decision raises ApprovalError and dispatches
nothing, and no worker ever runs the call. Background turns are dispatched into the in-memory
recorder and run with ``services.run_turn``; the ledger counts the tool's effects.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import clear, recorded
from turnkit_django import Agent, ApprovalError, pending_approvals, services, tool
from turnkit_django.api.handles import Run
from turnkit_django.models import Event, Message, ToolExecution, Turn
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

ledger: list[str] = []


@pytest.fixture(autouse=True)
def _empty_ledger() -> None:
    ledger.clear()


@tool(approval=True)
def release_funds(order_id: str) -> str:
    """Release the funds of an order, once a person approves."""
    ledger.append(order_id)
    return f"released {order_id}"


def releaser(name: str) -> Agent:
    """Asks for the release once, then reports what the tool result said."""
    def respond(request: Any) -> Any:
        if request.messages[-1].role == "tool":
            return reply("reported")
        return call("release_funds", order_id="42")
    return Agent(name, description="Releases funds.", tools=[release_funds],
                 client=FunctionClient(respond))


def assert_never_ran(execution: ToolExecution) -> None:
    """The call is closed as never executed, its approval cancelled, durably and visibly."""
    execution.refresh_from_db()
    assert (execution.status, execution.attempts) == ("cancelled", 0)
    assert execution.approval["state"] == "cancelled"
    message = Message.objects.get(tool_execution_id=execution.pk, kind="tool_result")
    assert message.content[0]["content"]["error"] == "not_executed"
    assert message.metadata["interrupted"] is False
    events = Event.objects.filter(turn_id=execution.turn_id, type="approval.cancelled")
    assert [e.payload["execution_id"] for e in events] == [execution.pk]
    assert ledger == []


def test_a_cancelled_background_turn_never_runs_its_parked_call(
        registered, django_capture_on_commit_callbacks):
    run = registered(releaser("bg-releaser")).submit("release it")
    assert services.run_turn(run.id) and run.refresh().status == "paused"
    execution = ToolExecution.objects.awaiting_approval().get(turn_id=run.id)

    run.cancel(principal={"user": 1})
    assert_never_ran(execution)
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        with pytest.raises(ApprovalError, match="nothing will run"):
            run.approve(execution.tool_call_id, principal={"user": 1})
    assert recorded() == []  # the refused decision rang for no worker
    assert services.run_turn(run.id) is False  # a late doorbell finds nothing to run
    services.drain()
    assert run.refresh().status == "cancelled" and ledger == []
    assert pending_approvals() == []


def test_a_cascade_cancel_closes_a_childs_parked_call_as_never_executed(registered):
    def orchestrate(request: Any) -> Any:
        if request.messages[-1].role == "tool":
            return reply("joined")
        return call("child-releaser", id="call_child", task="release order 42")

    parent = registered(Agent("parent-of-releaser", sub_agents=[releaser("child-releaser")],
                              client=FunctionClient(orchestrate)))
    run = parent.submit("delegate the release")
    assert services.run_turn(run.id) and run.refresh().status == "waiting"
    child = Turn.objects.get(parent_turn_id=run.id)
    assert services.run_turn(child.pk)
    execution = ToolExecution.objects.awaiting_approval().get(turn_id=child.pk)

    run.cancel(cascade=True, principal={"user": 1})
    assert Turn.objects.get(pk=child.pk).status == "cancelled"
    assert_never_ran(execution)
    with pytest.raises(ApprovalError, match="was cancelled before it ran"):
        Run(Turn.objects.get(pk=run.id)).deny(execution.tool_call_id, reason="too late")
    assert services.run_turn(child.pk) is False and ledger == []
