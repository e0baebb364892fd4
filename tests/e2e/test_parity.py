"""TurnKit 0.8-0.10 features on real workers (issue 16, done-when 1).

* a background lead fans typed delegations out to workers: each child gets the task the
  application built (the page's text), the lead's model never sees it, the tool policy blocks
  one call, and the results join in call order;
* a structured evaluation on a worker, then a final save after the spend is exhausted, its
  worker SIGKILLed inside the save: the other worker re-runs the save with the same key, the
  other call of the exhausting response never runs, and no model request follows.

The agents are in ``tests/testapp/parity_agents.py``.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.e2e.harness import Cluster, script, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from tests.testapp.parity_agents import PageArgs, page_task, page_text
from turnkit_django import load_turn
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import ToolStatus, TurnStatus
from turnkit_django.messages import ToolResultPart, load_parts
from turnkit_django.models import Message, ToolExecution, Turn

pytestmark = pytest.mark.django_db(transaction=True)


def read(*pages: int) -> dict:
    return {"calls": [{"call": "read_page", "args": {"page": page}} for page in pages]}


@pytest.mark.timeout(120)
def test_typed_delegations_fan_out_to_workers_and_join_in_call_order(cluster: Cluster) -> None:
    cluster.start(2)
    root_id = get_agent("e2e_pages_lead").submit(script(read(1, 13, 2), {"reply": "joined"})).id

    root = wait_terminal([root_id], timeout=60)[root_id]

    assert root.status == TurnStatus.COMPLETED, root.error
    children = list(Turn.objects.filter(parent_turn_id=root_id).order_by("created_at"))
    assert [c.agent_name for c in children] == ["e2e_page_reader"] * 2
    tasks = [Message.objects.filter(conversation_id=c.conversation_id).order_by("sequence")
             .first().content[0]["text"] for c in children]
    assert tasks == [page_task(PageArgs(page=1)), page_task(PageArgs(page=2))]
    results = [part for m in Message.objects.filter(turn_id=root_id, role="tool")
               .order_by("sequence") for part in load_parts(m.content)
               if isinstance(part, ToolResultPart)]
    assert [r.content.get("turn_id") for r in results] == [children[0].pk, None,
                                                           children[1].pk]
    assert results[1].content["tool_policy_blocked"] is True
    # The lead's own transcript never held a page's text.
    lead_text = " ".join(str(m.content) for m in Message.objects.filter(
        conversation_id=root.conversation_id))
    assert page_text(1) not in lead_text and "lorem" not in lead_text
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_a_final_save_killed_mid_call_reruns_once_and_nothing_else_runs(cluster: Cluster) -> None:
    cluster.start(2)
    cluster.start_reconciler()
    check = {"calls": [{"call": "check_draft", "args": {"text": "final"}}],
             "usage": {"input_tokens": 1, "output_tokens": 0}}  # $1 of $2
    exhausting = {"calls": [{"call": "note", "args": {"text": "skipped"}},
                            {"call": "save_draft", "args": {"text": "final", "hold": "save"}}],
                  "usage": {"input_tokens": 3, "output_tokens": 0}}  # $4
    turn_id = get_agent("e2e_saver").submit(script(check, exhausting, {"reply": "unasked"})).id

    blocked = cluster.wait_ledger("gate.blocked", gate="save")[0]
    cluster.worker(blocked["worker"]).kill()  # inside the save, after its effect
    cluster.open_gate("save")
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 1
    saves = cluster.ledger("saved", turn=turn_id)
    save = ToolExecution.objects.get(turn_id=turn_id, tool_name="save_draft")
    assert len(saves) == 2 and {s["key"] for s in saves} == {save.idempotency_key}
    assert save.status == ToolStatus.COMPLETED and save.attempts == 2
    assert cluster.ledger("noted", turn=turn_id) == []
    assert ToolExecution.objects.get(turn_id=turn_id, tool_name="note").status == (
        ToolStatus.CANCELLED)
    assert Counter(m["step"] for m in cluster.ledger("model", turn=turn_id)) == {0: 1, 1: 1}
    assert row.output_text == '{"saved": "final"}'
    # The evaluation ran once on a worker and is charged to the turn with its model.
    assert len(cluster.ledger("evaluation", turn=turn_id)) == 1
    (receipt,) = load_turn(turn_id).evaluation_receipts
    assert receipt["status"] == "completed"
    assert load_turn(turn_id).cost_breakdown().by_model["e2e-judge"].calls == 1
    assert_scenario_invariants(cluster)
