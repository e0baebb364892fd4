"""The invariant checker: silent on data real runs leave, loud on each kind of corruption."""

from __future__ import annotations

import pytest
from django.core.management import CommandError, call_command
from django.db import IntegrityError, transaction
from django.utils import timezone

from tests.factories import (
    ConversationFactory,
    MessageFactory,
    ToolExecutionFactory,
    TurnFactory,
    calls,
    create_terminal_turns,
    result,
    text,
    tool_turn,
)
from tests.helpers import _disarm_failpoints, expire_lease, invariants
from turnkit_django import Agent, reconcile, tool
from turnkit_django.base import failpoints
from turnkit_django.models import Conversation, Delivery, Message, ToolExecution, Turn
from turnkit_django.testing import ScriptedClient, call, reply
from turnkit_django.testing.verify import Violation, assert_invariants, check_invariants, verify

__all__ = ["_disarm_failpoints", "invariants"]

pytestmark = pytest.mark.django_db
corrupts = pytest.mark.corrupts_data


@tool
def lookup(order_id: str) -> dict:
    """Look up an order."""
    return {"order_id": order_id, "status": "shipped"}


@tool(terminal=True)
def close_ticket(summary: str) -> str:
    """Close the ticket."""
    return f"closed: {summary}"


def agent(*script, **limits) -> Agent:
    writer = Agent("verify-writer", instructions="Write.", description="Writes copy.")
    return Agent("verify-support", tools=[lookup, close_ticket], sub_agents=[writer],
                 client=ScriptedClient(script), **limits)


def codes(violations: list[Violation]) -> list[str]:
    return sorted({v.code for v in violations})


def only(code: str, *fragments: str) -> list[Violation]:
    """Assert every violation has ``code`` and some message contains each fragment."""
    violations = check_invariants()
    assert violations, "the checker found nothing"
    assert codes(violations) == [code], violations
    for fragment in fragments:
        assert any(fragment in v.message for v in violations), (fragment, violations)
    return violations


# --------------------------------------------------------------------------- real runs


def test_passes_on_tool_batch_terminal_tool_and_sub_agent(invariants):
    run = agent(
        [call("lookup", order_id="1"), call("lookup", order_id="2")],
        call("verify-writer", task="write a note"),
        reply("a note"),
        [call("close_ticket", summary="done"), call("lookup", order_id="3")],
    ).run("Refund order 42")
    assert run.status == "completed", run.error
    assert ("lookup", "cancelled") in set(run.tool_executions().values_list("tool_name",
                                                                              "status"))
    report = verify()
    assert report.ok, report.violations
    assert (report.conversations, report.turns) == (2, 2)


def test_passes_on_budget_failures(invariants):
    iterations = agent(call("lookup", order_id="1"), call("lookup", order_id="2"),
                       max_iterations=1).run("Look twice")
    assert (iterations.status, iterations.error["limit"]) == ("failed", "max_iterations")
    slots = agent([call("lookup", order_id="1"), call("lookup", order_id="2"),
                   call("lookup", order_id="3")], max_tool_executions=1).run("Look thrice")
    assert (slots.status, slots.error["limit"]) == ("failed", "max_tool_executions")
    assert sorted(slots.tool_executions().values_list("status", flat=True)) == [
        "cancelled", "completed", "failed"]
    assert check_invariants() == []


def test_passes_on_conversation_turns(invariants):
    support = agent(reply("hi"), call("lookup", order_id="7"), reply("shipped"))
    conversation = support.conversation()
    assert conversation.ask("Hello").status == "completed"
    conversation.say("Also this", metadata={"input_key": "k-1"})
    assert conversation.ask("Where is order 7?").status == "completed"
    assert check_invariants(conversation_ids=[conversation.id]) == []


def test_crash_inside_tool_then_stale_repair_passes():
    run = agent(call("lookup", order_id="1"), reply("unused")).prepare("Crash in the tool")
    failpoints.arm("inside_tool")
    with pytest.raises(failpoints.SimulatedCrash):
        run.execute()
    # Running in the tools phase with its batch open and its execution running: still valid.
    assert run.refresh().status == "running"
    assert_invariants()
    expire_lease(run.id)
    assert reconcile().stale == [run.id]
    run.refresh()
    assert run.status == "stale"
    assert run.row.fence_log[-1]["reason"] == "abandoned inline turn"
    assert list(run.tool_executions().values_list("status", flat=True)) == ["interrupted"]
    assert_invariants()


# --------------------------------------------------------------------------- I1


@corrupts
def test_owned_write_after_completion_is_detected():
    turn = tool_turn()
    MessageFactory(turn=turn, role="assistant", content=text("late"), fence=turn.fence)
    only("I1", "was written after turn")


@corrupts
def test_terminal_turn_fields_are_checked():
    TurnFactory(completed=True, completed_at=None)
    TurnFactory(failed=True, error=None, claimed_by="worker-1")
    TurnFactory(running=True, completed_at=timezone.now())
    only("I1", "has no completed_at", "has no error record", "still claimed",
         "but has completed_at")


@corrupts
def test_terminal_turn_with_running_execution_is_detected():
    turn = tool_turn(answer=False, final=False, stale=True)
    ToolExecutionFactory(turn=turn, tool_call_id="call_1", status="running", completed_at=None)
    violations = check_invariants()
    assert codes(violations) == ["I1", "I3"]
    assert any("is still running" in v.message for v in violations)


# --------------------------------------------------------------------------- I2


@corrupts
def test_duplicate_input_and_broken_deliveries_are_detected():
    conversation = agent().conversation()
    conversation.say("pay", metadata={"input_key": "pay-1"})
    conversation.say("pay", metadata={"input_key": "pay-1"})
    row = conversation.row
    Delivery.objects.create(key="lost", destination_conversation=row,
                            delivered_at=timezone.now())
    delivered = Delivery.objects.create(key="twice", destination_conversation=row)
    first = conversation.say("hi", metadata={"delivery_id": delivered.pk})
    conversation.say("hi", metadata={"delivery_id": delivered.pk})
    Delivery.objects.filter(pk=delivered.pk).update(message=first, delivered_at=timezone.now())
    only("I2", "input input_key='pay-1' appears twice", "delivered delivery has no message",
         f"delivery_id={delivered.pk!r} appears twice")


@corrupts
def test_valid_delivery_passes():
    conversation = ConversationFactory()
    delivery = Delivery.objects.create(key="ok", destination_conversation=conversation)
    message = MessageFactory(conversation=conversation, metadata={"delivery_id": delivery.pk})
    Delivery.objects.filter(pk=delivery.pk).update(message=message, delivered_at=timezone.now())
    assert check_invariants() == []
    Delivery.objects.filter(pk=delivery.pk).update(delivered_at=None)
    only("I2", "no delivered_at")


# --------------------------------------------------------------------------- I3


@corrupts
def test_tool_call_without_result_is_detected():
    tool_turn(answer=False)
    only("I3", "has no result before assistant message")


@corrupts
def test_open_batch_is_allowed_only_in_the_tools_phase():
    turn = tool_turn(answer=False, final=False, running=True, state={"phase": "tools"})
    assert check_invariants() == []
    Turn.objects.filter(pk=turn.pk).update(state={"phase": "model"})
    only("I3", "has no result and turn is running in phase 'model'")


@corrupts
def test_two_results_for_one_call_are_detected():
    turn = tool_turn(final=False)
    MessageFactory(turn=turn, role="tool", kind="tool_result", content=result("call_1"),
                   tool_execution=turn.tool_executions.get())
    MessageFactory(turn=turn, role="assistant", content=text("done"))
    only("I3", "has a second result")


@corrupts
def test_result_for_unknown_call_and_late_result_are_detected():
    turn = tool_turn(call_ids=("call_1", "call_2"), answer=False, final=False)
    MessageFactory(turn=turn, role="tool", kind="tool_result", content=result("call_9"))
    MessageFactory(turn=turn, role="tool", kind="tool_result", content=result("call_1"))
    MessageFactory(turn=turn, role="assistant", kind="tool_call", content=calls("call_3"))
    MessageFactory(turn=turn, role="tool", kind="tool_result", content=result("call_2"))
    MessageFactory(turn=turn, role="tool", kind="tool_result", content=result("call_3"))
    MessageFactory(turn=turn, role="assistant", content=text("done"))
    only("I3", "answers no call", "comes after the next assistant message",
         "'call_2' of turn")


@corrupts
def test_sequence_gap_and_last_sequence_mismatch_are_detected():
    conversation = ConversationFactory()
    MessageFactory(conversation=conversation)
    MessageFactory(conversation=conversation, sequence=3)
    only("I3", "sequences 2..2 are missing", "last_sequence is 1")
    Conversation.objects.filter(pk=conversation.pk).update(last_sequence=4)
    only("I3", "last_sequence is 4 but the last message has sequence 3")


def test_duplicate_sequence_is_refused_by_the_database():
    conversation = ConversationFactory()
    MessageFactory(conversation=conversation)
    with pytest.raises(IntegrityError), transaction.atomic():
        MessageFactory(conversation=conversation, sequence=1)
    assert check_invariants() == []


@corrupts
def test_executions_must_match_results():
    turn = tool_turn(call_ids=("call_1", "call_2"), final=False, running=True,
                     state={"phase": "tools"})
    ToolExecution.objects.filter(turn=turn, tool_call_id="call_2").update(status="running")
    stray = ToolExecutionFactory(turn=turn, tool_call_id="call_x")
    Message.objects.filter(turn=turn, content=result("call_1")).update(tool_execution=stray)
    violations = only("I3", "'call_2' is still running but has a result",
                      "for 'call_x' answers no call", "'call_x' has no result message",
                      f"points at tool execution {stray.pk!r}")
    assert len(violations) == 4, violations


# --------------------------------------------------------------------------- I4


@corrupts
def test_write_under_a_revoked_fence_is_detected():
    turn = tool_turn(final=False, running=True, state={"phase": "model"})
    last = Conversation.objects.get(pk=turn.conversation_id).last_sequence
    Turn.objects.filter(pk=turn.pk).update(status="pending", fence=2, claimed_by="", fence_log=[
        {"fence": 1, "revoked_after_sequence": last, "reason": "lease expired", "at": "now"}])
    assert check_invariants() == []
    MessageFactory(turn=turn, role="assistant", content=text("zombie"), fence=1)
    only("I4", "revoked after #3 (lease expired)")


@corrupts
def test_fence_above_the_turn_and_decreasing_fences_are_detected():
    turn = TurnFactory(running=True, fence=3)
    MessageFactory(turn=turn, role="assistant", content=text("a"), fence=3)
    MessageFactory(turn=turn, role="assistant", content=text("b"), fence=2)
    ToolExecutionFactory(turn=turn, fence=4)
    MessageFactory(turn=turn, role="assistant", content=calls("call_f0"), fence=3)
    violations = check_invariants()
    assert codes(violations) == ["I3", "I4"], violations
    i4 = [v.message for v in violations if v.code == "I4"]
    assert any("after #1 with fence 3" in m for m in i4), i4
    assert any("above the fence 3" in m for m in i4), i4


# --------------------------------------------------------------------------- scope, command


@corrupts
def test_filters_select_whole_conversations():
    broken = tool_turn(answer=False)
    fine = tool_turn()
    assert check_invariants(conversation_ids=[fine.conversation_id]) == []
    assert check_invariants(turn_ids=[fine.pk]) == []
    assert codes(check_invariants(turn_ids=[broken.pk])) == ["I3"]
    report = verify(turn_ids=[fine.pk], conversation_ids=[broken.conversation_id])
    assert (report.conversations, report.turns, len(report.violations)) == (2, 2, 1)


@corrupts
def test_assert_invariants_lists_violations():
    turn = tool_turn(answer=False)
    with pytest.raises(AssertionError, match=rf"1 invariant violation\(s\):\n  I3 .*{turn.pk}"):
        assert_invariants()


@corrupts
def test_command_reports_ok_and_fails_on_violations(capsys):
    fine = tool_turn()
    call_command("turnkit_verify")
    assert capsys.readouterr().out.strip() == "ok: 1 conversations, 1 turns checked"
    broken = tool_turn(answer=False)
    with pytest.raises(CommandError, match="1 invariant violation"):
        call_command("turnkit_verify")
    assert "I3" in capsys.readouterr().out
    call_command("turnkit_verify", "--turn", fine.pk, "--conversation", fine.conversation_id)
    assert "ok: 1 conversations" in capsys.readouterr().out
    with pytest.raises(CommandError):
        call_command("turnkit_verify", "--turn", fine.pk, "--turn", broken.pk)


# --------------------------------------------------------------------------- history


def test_bulk_history_is_valid_and_checked_with_bounded_queries(django_assert_max_num_queries):
    ids = create_terminal_turns(2000, per_conversation=4)
    assert Turn.objects.filter(pk__in=ids[:10], status="completed").count() == 10
    conversations = 500
    # One messages query per conversation, plus turns, executions and deliveries per chunk,
    # plus three for I6 and I7 (active turns only: none here).
    with django_assert_max_num_queries(conversations + 3 * 3 + 2 + 3):
        report = verify()
    assert report.ok, report.violations[:5]
    assert (report.conversations, report.turns) == (conversations, 2000)
