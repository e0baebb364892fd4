"""Celery is only a doorbell (testing.md scenarios 6 and 8, issue 3 Done-when 3).

Duplicate ``run_turn`` messages, delivered concurrently or at the same moment, execute a turn
once; turns of one conversation run one at a time in submission order; and a Redis server lost
with work queued is repaired from PostgreSQL by the reconcile loop.
"""

from __future__ import annotations

from collections import Counter
from itertools import pairwise
from uuid import uuid4

import pytest

from tests.e2e.harness import (
    Cluster,
    listening,
    queued,
    restart_redis_empty,
    ring,
    script,
    submit,
    wait_for,
    wait_terminal,
)
from tests.e2e.invariants import assert_scenario_invariants
from tests.testapp.agents import SCRIPTED_AGENT
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import TurnStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.timeout(60)
def test_s6_duplicate_run_turn_messages_execute_the_turn_once(cluster: Cluster) -> None:
    cluster.start(2)
    turn_id = submit({"call": "unsafe_effect", "args": {"label": "s6", "hold": "s6-tool"}},
                     {"reply": "once"})
    duplicate = str(uuid4())
    ring(turn_id, task_id=duplicate)  # the same message twice: same task id
    ring(turn_id, task_id=duplicate)

    # While the winner is inside its tool, the other worker takes both copies and does nothing.
    winner = cluster.wait_ledger("gate.blocked", gate="s6-tool")[0]["worker"]

    def loser_returns() -> list[dict[str, object]] | None:
        done = [d for d in cluster.run_turn_deliveries(turn_id, "task.postrun")
                if d["worker"] != winner]
        return done if len(done) == 2 else None

    losers = wait_for(loser_returns, timeout=30, what="the duplicate deliveries to finish")
    assert all(d["state"] == "SUCCESS" for d in losers)
    cluster.open_gate("s6-tool")
    row = wait_terminal([turn_id], timeout=30)[turn_id]
    wait_for(lambda: len(cluster.run_turn_deliveries(turn_id, "task.postrun")) == 3,
             timeout=30, what="all three deliveries to return")

    assert row.status == TurnStatus.COMPLETED, row.error
    deliveries = cluster.run_turn_deliveries(turn_id)
    assert len(deliveries) == 3
    assert {d["worker"] for d in deliveries} == {winner, losers[0]["worker"]}
    assert len(cluster.ledger("event", type="turn.started", turn=turn_id)) == 1
    assert Counter(m["step"] for m in cluster.ledger("model", turn=turn_id)) == {0: 1, 1: 1}
    assert len(cluster.ledger("effect", turn=turn_id)) == 1
    assert (row.fence, row.fence_log) == (2, []), "one claim, then completion"
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(90)
def test_two_deliveries_at_the_same_moment_execute_once(cluster: Cluster) -> None:
    """Done-when 3: two workers each hold a copy, then both are released into run_turn at once."""
    workers = cluster.start(2)
    for index in range(10):
        with cluster.hold_tasks() as release:
            turn_id = submit({"call": "unsafe_effect", "args": {"label": f"same-{index}"}},
                             {"reply": "once"})
            ring(turn_id)
            held = cluster.wait_ledger("hold.waiting", count=2, timeout=30, args=[turn_id])
            release()
        wait_terminal([turn_id], timeout=30)
        wait_for(lambda tid=turn_id: len(cluster.run_turn_deliveries(tid, "task.postrun")) == 2,
                 timeout=30, what="both deliveries to return")

        assert {h["worker"] for h in held} == {w.name for w in workers}
        assert len(cluster.ledger("event", type="turn.started", turn=turn_id)) == 1
        assert len(cluster.ledger("effect", turn=turn_id)) == 1
        assert Counter(m["step"] for m in cluster.ledger("model", turn=turn_id)) == {0: 1, 1: 1}
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(90)
def test_turns_of_one_conversation_run_one_at_a_time_in_submission_order(
        cluster: Cluster) -> None:
    """Done-when 3: the serial lane, with spare workers and extra doorbells trying to break it."""
    cluster.start(3)
    conversation = get_agent(SCRIPTED_AGENT).conversation()
    turn_ids = []
    for index in range(4):
        turn = conversation.ask(script({"call": "span", "args": {"label": f"t{index}",
                                                                  "seconds": 0.3}},
                                       {"reply": f"r{index}"}), submit=True)
        turn_ids.append(turn.id)
    for turn_id in turn_ids[1:]:
        ring(turn_id)
        ring(turn_id)

    rows = wait_terminal(turn_ids, timeout=60)

    assert [rows[t].status for t in turn_ids] == [TurnStatus.COMPLETED] * 4
    assert [rows[t].output_text for t in turn_ids] == ["r0", "r1", "r2", "r3"]
    # From the ledger: each turn's model calls and span lie strictly after the previous turn's.
    windows = []
    for turn_id in turn_ids:
        facts = [e for e in cluster.ledger() if e.get("turn") == turn_id
                 and e["ev"] in ("model", "span.start", "span.end")]
        windows.append((min(f["t"] for f in facts), max(f["t"] for f in facts)))
        assert len(cluster.ledger("event", type="turn.started", turn=turn_id)) == 1
    assert windows == sorted(windows)
    assert all(end < start for (_, end), (start, _) in pairwise(windows))
    # From the database: each turn started after the previous one completed.
    for before, after in pairwise(turn_ids):
        assert rows[before].completed_at <= rows[after].started_at
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(150)
def test_s8_redis_lost_with_work_queued_is_redispatched_from_the_database(
        cluster: Cluster) -> None:
    workers = cluster.start(2)
    busy = [submit({"call": "safe_effect", "args": {"label": f"busy{i}", "hold": f"s8-{i}"}},
                   {"reply": "ok"}) for i in range(2)]
    for index in range(2):
        cluster.wait_ledger("gate.blocked", gate=f"s8-{index}")
    waiting = [submit({"call": "safe_effect", "args": {"label": f"queued{i}"}}, {"reply": "ok"})
               for i in range(6)]
    wait_for(lambda: queued() >= len(waiting), timeout=10, what="the doorbells to queue up")

    restart_redis_empty()
    assert queued() == 0, "the new Redis is empty: every queued doorbell is lost"
    # Recovery starts after the loss is checked (a pass ringing first would hide it).
    cluster.start_reconciler()
    for index in range(2):
        cluster.open_gate(f"s8-{index}")

    rows = wait_terminal([*busy, *waiting], timeout=120)

    assert all(rows[t].status == TurnStatus.COMPLETED for t in rows), {
        t: (r.status, r.error) for t, r in rows.items()}
    assert all(w.alive() for w in workers)
    # Both workers consume from the new server (no "reconnected but idle" worker).
    wait_for(lambda: listening() == len(workers), timeout=30, what="both workers to listen")
    assert_scenario_invariants(cluster)
