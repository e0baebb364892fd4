"""Cancelling a turn whose tool call waits for a person: the call never ran, and says so.

A call parked for approval is ``pending`` with ``approval.state == "requested"`` and its turn
``paused``. Cancelling the turn gives the call the "not executed" result (never "outcome
unknown"), moves the approval to ``cancelled`` with a durable ``approval.cancelled`` event, and
a later ``approve``/``deny`` raises an ApprovalError saying the turn was cancelled. The same
holds for an intent a pause at a step boundary left unstarted. The ledger counts the tool's
effects outside turnkit's tables.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from turnkit_django import Agent, ApprovalError, ToolContext, pending_approvals, tool
from turnkit_django.events import event as any_event
from turnkit_django.models import Event, Message, ToolExecution, Turn
from turnkit_django.services import controls
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

ledger: list[str] = []


@pytest.fixture(autouse=True)
def _empty_ledger() -> None:
    ledger.clear()


@pytest.fixture
def heard() -> Iterator[list[str]]:
    """The types of the tool call and approval signals sent during the test."""
    seen: list[str] = []

    def receive(sender: Any, event: Any, **kwargs: Any) -> None:
        if event.type.startswith(("tool_call.", "approval.")):
            seen.append(event.type)

    any_event.connect(receive)
    yield seen
    any_event.disconnect(receive)


@tool(approval=True)
def wire_money(order_id: str) -> str:
    """Wire money for an order, once a person approves."""
    ledger.append(order_id)
    return f"wired {order_id}"


def parked(registered: Any, name: str = "wirer") -> Any:
    client = ScriptedClient([call("wire_money", order_id="42"), reply("done")])
    run = registered(Agent(name, client=client, tools=[wire_money])).run("wire it")
    assert run.status == "paused" and ledger == []
    return run


def result_of(execution: ToolExecution) -> tuple[dict[str, Any], dict[str, Any]]:
    """The model-visible content and the metadata of the call's one tool_result message."""
    message = Message.objects.get(tool_execution_id=execution.pk, kind="tool_result")
    return message.content[0]["content"], message.metadata


@pytest.mark.parametrize("pause_first", [False, True])
def test_cancelling_a_call_parked_for_approval_reports_it_not_executed(
        registered, heard, pause_first, django_capture_on_commit_callbacks):
    run = parked(registered, f"wirer-{pause_first}")
    if pause_first:  # pausing a turn paused for the approval holds it; cancelling still wins
        run.pause(principal={"user": 1})
    with django_capture_on_commit_callbacks(execute=True):  # the signals follow the commit
        run.cancel(principal={"user": 1})

    execution = ToolExecution.objects.get(turn_id=run.id)
    assert run.status == "cancelled"
    assert execution.status == "cancelled" and execution.attempts == 0
    content, metadata = result_of(execution)
    assert content == {"error": "not_executed", "message": "Not executed: the turn was cancelled."}
    assert metadata["interrupted"] is False
    assert execution.approval["state"] == "cancelled"
    assert execution.approval["reason"] == "the turn was cancelled"
    event = Event.objects.get(root_turn_id=run.id, type="approval.cancelled")
    assert event.payload == {"call_id": execution.tool_call_id, "execution_id": execution.pk,
                             "tool": "wire_money", "reason": "the turn was cancelled"}
    assert heard[-1:] == ["approval.cancelled"]  # no tool_call.interrupted: it never ran
    assert "tool_call.interrupted" not in heard
    assert pending_approvals() == [] and ledger == []


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_decision_on_a_cancelled_turns_call_says_so_and_runs_nothing(registered, decision):
    run = parked(registered, f"late-{decision}")
    call_id = run.pending_approvals()[0].tool_call_id
    run.cancel()
    with pytest.raises(ApprovalError, match="was cancelled before it ran; nothing will run"):
        getattr(run, decision)(call_id, principal={"user": 1})
    execution = ToolExecution.objects.get(tool_call_id=call_id)
    assert (execution.status, execution.approval["state"]) == ("cancelled", "cancelled")
    assert run.refresh().status == "cancelled" and ledger == []


def test_an_intent_a_pause_left_unstarted_is_not_executed_when_the_turn_is_cancelled(
        registered):
    @tool
    def step(ctx: ToolContext, n: int) -> int:
        """Count, recording each effect."""
        ledger.append(str(n))
        if n == 1:  # the application pauses the run while this call runs
            controls.pause(Turn.objects.get(pk=ctx.turn.id))
        return n

    client = FunctionClient(lambda request: [call("step", n=1), call("step", n=2)])
    run = registered(Agent("paused-between", client=client, tools=[step])).run("go")
    assert run.status == "paused" and ledger == ["1"]
    second = ToolExecution.objects.get(turn_id=run.id, arguments={"n": 2})
    assert (second.status, second.attempts) == ("pending", 0)  # its intent, never started

    run.cancel()
    second.refresh_from_db()
    assert second.status == "cancelled"
    content, metadata = result_of(second)
    assert content["error"] == "not_executed" and metadata["interrupted"] is False
    assert ledger == ["1"]


def test_an_approved_call_counts_the_one_attempt_that_ran(registered):
    run = parked(registered, "approved-once")
    run.approve(run.pending_approvals()[0].tool_call_id)
    assert run.status == "completed" and ledger == ["42"]
    assert ToolExecution.objects.get(turn_id=run.id).attempts == 1
