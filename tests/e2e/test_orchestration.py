"""Orchestration on real workers (issue 4, done-when 1 and 2).

* an orchestrator fans out to three sub-agents that run on two workers in parallel and finish in
  another order than called: the parent waits without holding a worker, resumes once, and gets
  the results in call order;
* a cascade cancel of a running tree (children on other workers, one child launching a grandchild
  at that moment): every descendant ends cancelled, no write lands after the cancel, transcripts
  stay valid, cancelling again changes nothing; a retain cancel leaves the children running.

The agents are in ``tests/testapp/tree_agents.py``: each follows the script in its input, and a
sub-agent's task is its own script.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from tests.e2e.harness import Cluster, script, wait_for, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from turnkit_django import services
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import TurnStatus
from turnkit_django.messages import load_parts
from turnkit_django.models import Message, ToolExecution, Turn

pytestmark = pytest.mark.django_db(transaction=True)


def delegate(*scripts: str) -> dict[str, Any]:
    """A step delegating each script to ``e2e_child``, all in one response."""
    return {"calls": [{"call": "e2e_child", "args": {"task": task}} for task in scripts]}


def orchestrate(*steps: dict[str, Any]) -> str:
    return get_agent("e2e_orchestrator").submit(script(*steps)).id


def children(turn_id: str) -> list[Turn]:
    return list(Turn.objects.filter(parent_turn_id=turn_id).order_by("created_at"))


def tree(root_id: str) -> dict[str, tuple[str, int]]:
    return dict((pk, (status, fence)) for pk, status, fence in
                Turn.objects.filter(root_turn_id=root_id).values_list("pk", "status", "fence"))


def quiet(cluster: Cluster) -> None:
    """Wait until every task a worker started has returned."""
    wait_for(lambda: len(cluster.ledger("task.prerun")) == len(cluster.ledger("task.postrun")),
             timeout=30, what="the workers to finish their tasks")


@pytest.mark.timeout(120)
def test_fan_out_to_three_children_on_two_workers_joins_in_call_order(cluster: Cluster) -> None:
    cluster.start(2)
    root_id = orchestrate(delegate(script({"reply": "first", "gate": "fan-first"}),
                                   script({"reply": "second"}),
                                   script({"reply": "third"})),
                          {"reply": "joined"})

    first_blocked = cluster.wait_ledger("gate.blocked", gate="fan-first")[0]
    # The first child may start (and block) while its parent is still launching the others.
    kids = wait_for(lambda: len(found := children(root_id)) == 3 and found, timeout=30,
                    what="the parent to launch its three children")
    assert [k.agent_name for k in kids] == ["e2e_child"] * 3
    # The first child holds one worker; the other worker runs the second and the third.
    rows = wait_terminal([kids[1].pk, kids[2].pk], timeout=45)
    assert {row.status for row in rows.values()} == {TurnStatus.COMPLETED}
    root = Turn.objects.get(pk=root_id)
    assert (root.status, root.claimed_by) == (TurnStatus.WAITING, "")
    assert Turn.objects.get(pk=kids[0].pk).status == TurnStatus.RUNNING
    other = {e["worker"] for k in kids[1:] for e in cluster.ledger("model", turn=k.pk)}
    assert other and first_blocked["worker"] not in other, "the children ran in parallel"

    cluster.open_gate("fan-first")
    root = wait_terminal([root_id], timeout=45)[root_id]

    assert root.status == TurnStatus.COMPLETED, root.error
    assert root.output_text == "joined"
    finished = sorted(kids, key=lambda k: Turn.objects.get(pk=k.pk).completed_at)
    assert finished[-1].pk == kids[0].pk, "the first child finished last"
    results = [part for m in Message.objects.filter(turn_id=root_id, role="tool")
               .order_by("sequence") for part in load_parts(m.content)]
    assert [r.content["output_text"] for r in results] == ["first", "second", "third"]
    assert [r.content["turn_id"] for r in results] == [k.pk for k in kids]
    # It resumed once: two claims, one model call per step, fence 4 (claim, suspend, claim, end).
    assert len(cluster.ledger("event", type="turn.started", turn=root_id)) == 2
    assert Counter(m["step"] for m in cluster.ledger("model", turn=root_id)) == {0: 1, 1: 1}
    assert root.fence == 4
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(150)
@pytest.mark.parametrize("moment", ["launched", "launching"])
def test_cascade_cancel_of_a_running_tree_stops_every_descendant(cluster: Cluster,
                                                                 moment: str) -> None:
    """``launched``: child B's leaf runs on a third worker when the cancel comes; ``launching``:
    B's answer (launch the leaf) is released at the moment the cancel runs, so the launch and
    the cancel race: either the leaf exists and is cancelled, or B is fenced out first."""
    cluster.start(3)
    launch = {"call": "launch_agent",
              "args": {"agent": "e2e_leaf", "task": script({"reply": "leaf", "gate": "cc-leaf"})}}
    # B's last answer is gated in both cases: a B that finished before the cancel would be a
    # legitimate "completed" (the cancel then finds the leaf under a finished parent).
    b_steps = ([launch, {"reply": "b done", "gate": "cc-b"}] if moment == "launched"
               else [{**launch, "gate": "cc-b"}, {"reply": "b done", "gate": "cc-b2"}])
    root_id = orchestrate(
        delegate(script({"call": "unsafe_effect", "args": {"label": "a", "hold": "cc-a"}},
                        {"reply": "a done"}),
                 script(*b_steps)),
        {"reply": "never"},
    )
    cluster.wait_ledger("gate.blocked", gate="cc-a")  # child A is inside its tool
    b_blocked = cluster.wait_ledger("gate.blocked", gate="cc-b")[0]  # B is in a model call
    assert Turn.objects.get(pk=root_id).status == TurnStatus.WAITING
    if moment == "launched":
        cluster.wait_ledger("gate.blocked", gate="cc-leaf")  # the leaf runs on the third worker
    else:
        cluster.open_gate("cc-b")
        cluster.wait_ledger("model.done", turn=b_blocked["turn"], step=0)

    report = services.cancel(root_id, cascade=True, principal={"user": "operator"})
    assert report.changed
    for gate in ("cc-a", "cc-b", "cc-b2", "cc-leaf"):
        cluster.open_gate(gate)
    quiet(cluster)
    services.cancel_sweep()  # beat's job: descendants launched while the cancel ran
    quiet(cluster)

    statuses = tree(root_id)
    assert {status for status, _ in statuses.values()} == {TurnStatus.CANCELLED}, statuses
    # Whether the leaf was launched before the cancel or not, it never wrote an answer.
    leaves = Turn.objects.filter(root_turn_id=root_id, agent_name="e2e_leaf")
    assert leaves.count() == 1 if moment == "launched" else leaves.count() <= 1
    assert not Message.objects.filter(turn__in=leaves, role="assistant").exists()
    a = Turn.objects.get(root_turn_id=root_id, parent_turn_id=root_id,
                         tool_executions__tool_name="unsafe_effect")
    execution = ToolExecution.objects.get(turn_id=a.pk)
    assert execution.status == "interrupted", "the tool's late result was fenced out"
    assert len(cluster.ledger("effect", turn=a.pk)) == 1
    # Cancelling again changes nothing.
    before = (tree(root_id), Message.objects.count())
    assert not services.cancel(root_id, cascade=True).changed
    assert (tree(root_id), Message.objects.count()) == before
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_a_retain_cancel_leaves_the_children_running(cluster: Cluster) -> None:
    cluster.start(2)
    root_id = orchestrate(delegate(script({"reply": "kept", "gate": "retain-a"}),
                                   script({"reply": "kept too"})),
                          {"reply": "never"})
    cluster.wait_ledger("gate.blocked", gate="retain-a")
    wait_for(lambda: Turn.objects.filter(pk=root_id, status=TurnStatus.WAITING).exists(),
             timeout=30, what="the root to wait")

    report = services.cancel(root_id)
    assert report.cancelled == [root_id]
    cluster.open_gate("retain-a")
    rows = wait_terminal([k.pk for k in children(root_id)], timeout=45)

    assert {row.status for row in rows.values()} == {TurnStatus.COMPLETED}
    assert sorted(row.output_text for row in rows.values()) == ["kept", "kept too"]
    assert Turn.objects.get(pk=root_id).status == TurnStatus.CANCELLED
    quiet(cluster)
    assert_scenario_invariants(cluster)
