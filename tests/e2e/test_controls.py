"""Interactive controls with real Celery workers (issue 15): an approval survives the death of
the worker that received it, an operator's pause on a parked turn holds it through the approval,
a pause at a step boundary resumes on another worker, steering
supersedes a proposed call, and keyed input retried five times appends one message."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Cluster, submit, wait_for, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from tests.testapp.agents import SCRIPTED_AGENT
from turnkit_django import load_conversation, load_run
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Message, ToolExecution, Turn

pytestmark = pytest.mark.django_db(transaction=True)


def paused(turn_id: str) -> Turn:
    return wait_for(lambda: Turn.objects.filter(pk=turn_id, status=TurnStatus.PAUSED).first(),
                    timeout=30, what=f"turn {turn_id} to pause")


@pytest.mark.timeout(120)
def test_an_approved_refund_runs_once_though_its_worker_is_killed_after_the_approval(
        cluster: Cluster) -> None:
    cluster.start(2)
    cluster.start_reconciler()
    turn_id = submit({"call": "approved_refund", "args": {"label": "r1"}}, {"reply": "refunded"})
    row = paused(turn_id)
    assert row.claimed_by == "" and cluster.ledger("effect", turn=turn_id) == []
    execution = ToolExecution.objects.awaiting_approval().get(turn_id=turn_id)

    with cluster.hold_tasks() as release:
        load_run(turn_id).approve(execution.tool_call_id, principal={"staff": 1})
        held = cluster.wait_ledger("hold.waiting", args=[turn_id])[0]
        cluster.worker(held["worker"]).kill()  # the doorbell's worker dies before the claim
        release()
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.output_text == "refunded"
    assert len(cluster.ledger("effect", turn=turn_id, tool="approved_refund")) == 1
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_a_pause_on_a_parked_turn_holds_it_through_the_approval_until_resume(
        cluster: Cluster) -> None:
    cluster.start(1)
    turn_id = submit({"call": "approved_refund", "args": {"label": "h1"}}, {"reply": "refunded"})
    paused(turn_id)
    run = load_run(turn_id)
    run.pause(principal={"staff": 1})
    execution = ToolExecution.objects.awaiting_approval().get(turn_id=turn_id)
    run.approve(execution.tool_call_id, principal={"staff": 1})
    row = Turn.objects.get(pk=turn_id)
    assert row.status == TurnStatus.PAUSED and row.controls["pause_held"] is True
    assert ToolExecution.objects.get(pk=execution.pk).approval["state"] == "approved"

    run.resume(principal={"staff": 1})
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert len(cluster.ledger("effect", turn=turn_id, tool="approved_refund")) == 1
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_a_pause_at_a_step_boundary_resumes_the_same_turn_on_another_worker(
        cluster: Cluster) -> None:
    cluster.start(2)
    turn_id = submit({"call": "unsafe_effect", "args": {"label": "p1", "hold": "p-hold"}},
                     {"call": "unsafe_effect", "args": {"label": "p2"}}, {"reply": "done"})
    blocked = cluster.wait_ledger("gate.blocked", gate="p-hold")[0]
    load_run(turn_id).pause()
    cluster.open_gate("p-hold")
    row = paused(turn_id)
    assert row.claimed_by == ""
    assert [e["label"] for e in cluster.ledger("effect", turn=turn_id)] == ["p1"]
    cluster.worker(blocked["worker"]).stop()  # the next claim must be another worker's

    load_run(turn_id).resume()
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert [e["label"] for e in cluster.ledger("effect", turn=turn_id)] == ["p1", "p2"]
    workers = [e["worker"] for e in cluster.ledger("effect", turn=turn_id)]
    assert workers[0] == blocked["worker"] and workers[1] != blocked["worker"]
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_steering_a_background_turn_supersedes_the_proposed_call(cluster: Cluster) -> None:
    cluster.start(1)
    turn_id = submit({"calls": [{"call": "unsafe_effect", "args": {"label": "s1", "hold": "s"}},
                                {"call": "unsafe_effect", "args": {"label": "s2"}}]},
                     {"reply": "replanned"})
    cluster.wait_ledger("gate.blocked", gate="s")
    receipt = load_run(turn_id).steer("Prefer store credit.", key="steer-1")
    cluster.open_gate("s")
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert [e["label"] for e in cluster.ledger("effect", turn=turn_id)] == ["s1"]
    guidance = Message.objects.get(conversation_id=row.conversation_id,
                                   metadata__steer_key="steer-1")
    final = Message.objects.filter(conversation_id=row.conversation_id,
                                   role="assistant").order_by("-sequence").first()
    assert final is not None and guidance.sequence < final.sequence  # the model saw it
    assert Turn.objects.get(pk=turn_id).controls["steers"][0]["id"] == receipt["id"]
    assert ToolExecution.objects.get(turn_id=turn_id, arguments__label="s2").status == "cancelled"
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_post_and_ask_with_a_key_retried_five_times_append_one_message_each(
        cluster: Cluster) -> None:
    cluster.start(1)
    conv = get_agent(SCRIPTED_AGENT).conversation()
    turns = {conv.ask('{"steps": [{"reply": "asked"}]}', key="req-1", submit=True).id
             for _ in range(5)}
    assert len(turns) == 1
    for _ in range(5):
        conv.post('{"steps": [{"reply": "posted"}]}', key="msg-1")
    wait_for(lambda: load_conversation(conv.id).input_status("msg-1").status == "applied",
             timeout=60, what="the posted input to be applied")
    wait_terminal(list(Turn.objects.filter(conversation_id=conv.id).values_list("pk", flat=True)),
                  timeout=60)
    users = Message.objects.filter(conversation_id=conv.id, role="user")
    assert users.count() == 2
    assert conv.input_status("req-1").turn_id == turns.pop()
    assert_scenario_invariants(cluster)
