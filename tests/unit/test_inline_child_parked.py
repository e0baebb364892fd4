"""An inline sub-agent that stops for a person: its parent waits on it, never reports it failed.

A sub-agent run inside its parent's step (``Agent(sub_agents=[...])`` run inline) can stop
before it ends: a tool call parks for approval, or a cascading ``pause()`` reaches it at a step
boundary. The parent's delegation is then not finished: the parent parks too (``paused``, the
delegation's call back to ``pending``), the run's ``pending_approvals()`` lists the child's
call, and a decision continues the whole chain from the top, so the child's result (approved or
denied) is what the parent's model reads. The side effect runs once, after the approval, and
is never reported failed beforehand. The ledger counts the tool's effects outside turnkit's
tables.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnkit_django import Agent, ApprovalError, ToolContext, tool
from turnkit_django.models import Message, ToolExecution, Turn
from turnkit_django.services import controls
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

ledger: list[str] = []


@pytest.fixture(autouse=True)
def _empty_ledger() -> None:
    ledger.clear()


@tool(approval=True)
def refund(order_id: str) -> str:
    """Refund an order, once a person approves."""
    ledger.append(order_id)
    return f"refunded {order_id}"


def parent_result(run: Any) -> dict[str, Any]:
    """The tool result the parent's model read for its delegation."""
    message = Message.objects.get(turn_id=run.id, kind="tool_result")
    return message.content[0]


def desk(registered: Any, name: str, child_reply: str = "refunded it") -> tuple[Any, Any]:
    """A parent whose inline sub-agent parks its refund for approval."""
    child = registered(Agent(f"{name}-refunder", tools=[refund], client=ScriptedClient([
        call("refund", order_id="42"), reply(child_reply)])))
    parent_client = FunctionClient(lambda request: (
        reply("done") if request.messages[-1].role == "tool"
        else call(child.name, task="refund order 42")))
    parent = registered(Agent(name, sub_agents=[child], client=parent_client))
    return parent, child


def test_a_parked_call_in_an_inline_child_parks_its_parent(registered):
    parent, _ = desk(registered, "desk")
    run = parent.run("refund order 42")

    assert run.status == "paused"  # not completed: its delegation has no result yet
    child = Turn.objects.get(parent_turn_id=run.id)
    assert child.status == "paused" and ledger == []
    delegation = ToolExecution.objects.get(turn_id=run.id)
    assert delegation.status == "pending"  # not failed
    assert not Message.objects.filter(turn_id=run.id, kind="tool_result").exists()
    assert [e.tool_name for e in run.pending_approvals()] == ["refund"]


def test_approving_the_childs_call_finishes_child_then_parent_once(registered):
    parent, _ = desk(registered, "desk-approve")
    run = parent.run("refund order 42")
    call_id = run.pending_approvals()[0].pk

    run.approve(call_id, principal={"user": 1})

    assert run.refresh().status == "completed" and run.output_text == "done"
    child = Turn.objects.get(parent_turn_id=run.id)
    assert (child.status, child.output_text) == ("completed", "refunded it")
    assert ledger == ["42"]  # once
    result = parent_result(run)
    assert result["is_error"] is False and "refunded it" in str(result["content"])
    assert ToolExecution.objects.get(turn_id=run.id).status == "completed"
    assert run.approve(call_id) is not None and ledger == ["42"]  # a second approval: no-op


def test_denying_the_childs_call_gives_the_parent_the_childs_answer(registered):
    parent, _ = desk(registered, "desk-deny", child_reply="a person refused the refund")
    run = parent.run("refund order 42")

    run.deny(run.pending_approvals()[0].pk, reason="not eligible")

    assert run.refresh().status == "completed" and ledger == []
    result = parent_result(run)
    assert result["is_error"] is False  # the child completed: it read the denial
    assert "a person refused the refund" in str(result["content"])


def test_a_cascading_pause_reaching_an_inline_child_pauses_the_chain(registered):
    @tool
    def look_up(ctx: ToolContext, order_id: str) -> str:
        """Look an order up; the operator pauses the whole run meanwhile."""
        ledger.append(f"look:{order_id}")
        controls.pause(Turn.objects.get(pk=ctx.turn.id).root_turn, cascade=True)
        return "order 42: paid"

    child = registered(Agent("pausing-child", tools=[look_up], client=ScriptedClient([
        call("look_up", order_id="42"), reply("it is paid")])))
    parent = registered(Agent("pausing-parent", sub_agents=[child], client=FunctionClient(
        lambda request: reply("all done") if request.messages[-1].role == "tool"
        else call(child.name, task="check order 42"))))

    run = parent.run("check order 42")
    row = Turn.objects.get(parent_turn_id=run.id)
    assert (run.status, row.status) == ("paused", "paused")
    assert not Message.objects.filter(turn_id=run.id, kind="tool_result").exists()

    run.resume(cascade=True)
    assert run.refresh().status == "completed" and run.output_text == "all done"
    assert Turn.objects.get(pk=row.pk).status == "completed"
    assert ledger == ["look:42"]
    assert "it is paid" in str(parent_result(run)["content"])


def test_resuming_the_run_alone_continues_its_paused_inline_child(registered):
    @tool
    def look_up(ctx: ToolContext) -> str:
        """Look up; the operator pauses the whole run meanwhile."""
        controls.pause(Turn.objects.get(pk=ctx.turn.id).root_turn, cascade=True)
        return "found"

    child = registered(Agent("resumed-child", tools=[look_up], client=ScriptedClient([
        call("look_up"), reply("found it")])))
    parent = registered(Agent("resumed-parent", sub_agents=[child], client=FunctionClient(
        lambda request: reply("ok") if request.messages[-1].role == "tool"
        else call(child.name, task="look"))))
    run = parent.run("look")
    assert run.status == "paused"

    run.resume()  # the child is part of the parent's step: it continues with it
    assert run.refresh().status == "completed"


def test_resuming_a_run_whose_inline_child_waits_for_approval_is_refused(registered):
    parent, _ = desk(registered, "desk-resume")
    run = parent.run("refund order 42")
    with pytest.raises(Exception, match="waiting for an approval"):
        run.resume()
    assert run.refresh().status == "paused" and ledger == []


def test_cancelling_the_parent_closes_its_parked_childs_request(registered):
    parent, _ = desk(registered, "desk-cancel")
    run = parent.run("refund order 42")
    call_id = run.pending_approvals()[0].pk

    run.cancel()

    with pytest.raises(ApprovalError):
        run.approve(call_id)
    assert ledger == []
    assert Turn.objects.get(parent_turn_id=run.id).status == "cancelled"


def test_a_pause_of_the_parent_holds_the_chain_through_the_childs_approval(registered):
    parent, _ = desk(registered, "desk-held")
    run = parent.run("refund order 42")
    run.pause()  # the operator holds the run while its child's call waits

    run.approve(run.pending_approvals()[0].pk)
    child = Turn.objects.get(parent_turn_id=run.id)
    assert (run.refresh().status, child.status, ledger) == ("paused", "paused", [])

    run.resume()
    assert run.refresh().status == "completed" and ledger == ["42"]
