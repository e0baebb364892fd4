"""Invariants I6 (cascade cancels reach every descendant) and I7 (the wait graph).

Silent on what real runs leave (a fan-out waiting, a cascade, a retain cancel, released waiters);
loud on each kind of corruption.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.factories import ConversationFactory, TurnFactory
from tests.orchestration import answering
from turnkit_django import Agent, services
from turnkit_django.models import Turn, Wait
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.testing.verify import check_invariants, verify

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]
corrupts = pytest.mark.corrupts_data


def fan_out(registered: Any) -> Turn:
    """A submitted orchestrator waiting for two children; returns its row."""
    def respond(request: Any) -> Any:
        if request.messages[-1].role == "tool":
            return reply("joined")
        return [call("graph_child", id="call_1", task="one"),
                call("graph_child", id="call_2", task="two")]

    agent = registered(Agent("graph_parent", sub_agents=[answering("graph_child")],
                             client=FunctionClient(respond)))
    run = agent.submit("go")
    assert services.run_turn(run.id)
    return Turn.objects.get(pk=run.id)


def codes() -> list[tuple[str, str]]:
    return [(v.code, v.message) for v in check_invariants()]


def test_real_trees_and_waits_pass(registered):
    waiting = fan_out(registered)
    assert waiting.status == "waiting"
    assert codes() == []
    cancelled = fan_out(registered)
    services.cancel(cancelled.pk, cascade=True)
    retained = fan_out(registered)
    services.cancel(retained.pk)  # its children keep running: no cascade, no violation
    assert Turn.objects.filter(parent_turn_id=retained.pk, status="pending").count() == 2
    for child in Turn.objects.filter(parent_turn_id=waiting.pk):
        assert services.run_turn(child.pk)
    assert Turn.objects.get(pk=waiting.pk).status == "pending"
    assert codes() == []


@corrupts
def test_an_active_descendant_of_a_cascade_cancelled_turn_is_an_i6_violation(registered):
    root = fan_out(registered)
    services.cancel(root.pk, cascade=True)
    child = Turn.objects.filter(parent_turn_id=root.pk).first()
    grandchild = TurnFactory(parent_turn=child, conversation=ConversationFactory())
    found = [v for v in check_invariants() if v.code == "I6"]
    assert [(v.object_id, v.code) for v in found] == [(grandchild.pk, "I6")]
    assert root.pk not in found[0].message and child.pk in found[0].message
    # The sweep repairs it.
    assert services.cancel_sweep() == [grandchild.pk]
    assert not [v for v in check_invariants() if v.code == "I6"]


@corrupts
def test_a_deeper_descendant_under_a_finished_intermediate_is_found_too(registered):
    root = fan_out(registered)
    services.cancel(root.pk, cascade=True)
    child = Turn.objects.filter(parent_turn_id=root.pk).first()
    Turn.objects.filter(pk=child.pk).update(options={})  # as if a plain cancel
    grandchild = TurnFactory(parent_turn=child, conversation=ConversationFactory(),
                             status="waiting")
    TurnFactory(parent_turn=grandchild, conversation=ConversationFactory())
    found = {v.object_id for v in check_invariants() if v.code == "I6"}
    assert grandchild.pk in found and len(found) == 2


@corrupts
def test_a_waiter_left_waiting_after_its_targets_finished_is_an_i7_violation(registered):
    waiting = fan_out(registered)
    Turn.objects.filter(parent_turn_id=waiting.pk).update(status="cancelled")  # no maintenance
    (violation,) = [v for v in check_invariants() if v.code == "I7"]
    assert violation.object_id == waiting.pk and "released" in violation.message
    services.drain()
    assert not [v for v in check_invariants() if v.code == "I7"]


@corrupts
def test_a_waiting_turn_without_any_edge_is_an_i7_violation():
    stuck = TurnFactory(status="waiting", submitted_at="2026-01-01T00:00:00Z")
    assert [(v.code, v.object_id) for v in check_invariants() if v.code == "I7"] == [
        ("I7", stuck.pk)]


@corrupts
def test_a_wait_cycle_is_an_i7_violation():
    a, b, c = (TurnFactory(status="waiting") for _ in range(3))
    for waiter, target in ((a, b), (b, c), (c, a)):
        Wait.objects.create(waiter=waiter, target=target)
    (cycle,) = [v for v in check_invariants() if "cycle" in v.message]
    assert cycle.code == "I7"
    assert all(turn.pk in cycle.message for turn in (a, b, c))


@corrupts
def test_a_self_wait_and_a_same_lane_wait_are_i7_violations():
    own = TurnFactory(status="waiting")
    Wait.objects.create(waiter=own, target=own)
    lane = ConversationFactory()
    first = TurnFactory(conversation=lane, status="waiting")
    second = TurnFactory(conversation=lane)
    Wait.objects.create(waiter=first, target=second)
    messages = {(v.object_id, v.message.split(" ")[1]) for v in check_invariants()
                if v.code == "I7"}
    assert (first.pk, "waits") in messages
    assert any(object_id == own.pk for object_id, _ in messages)


@corrupts
def test_a_selection_checks_the_selected_conversations_only():
    stuck = TurnFactory(status="waiting")
    other = TurnFactory(status="waiting")
    report = verify(conversation_ids=[stuck.conversation_id])
    assert {v.object_id for v in report.violations} == {stuck.pk}
    assert {v.object_id for v in verify(turn_ids=iter([other.pk])).violations} == {other.pk}
