"""Worker deaths and hangs (testing.md scenarios 1, 2, 3, 5 and 12) with real Celery workers.

Each test holds a worker at a precise point with a ledger gate, injects the fault (SIGKILL of the
whole worker, SIGSTOP past the lease, a tool killing its own process), lets the reconcile loop
recover, and checks the outcome and the invariants from the database and the ledger.
"""

from __future__ import annotations

from collections import Counter

import pytest

from tests.e2e.harness import Cluster, submit, wait_for, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from tests.e2e.worker_settings import E2E_TURNKIT
from turnkit_django.base.error_records import unknown_result
from turnkit_django.base.states import ToolStatus, TurnStatus
from turnkit_django.models import Message, ToolExecution, Turn

pytestmark = pytest.mark.django_db(transaction=True)


def kill_worker_at(cluster: Cluster, gate: str) -> str:
    """SIGKILL the worker blocked at ``gate`` (main process and pool child); return its name."""
    blocked = cluster.wait_ledger("gate.blocked", gate=gate)[0]
    victim = cluster.worker(blocked["worker"])
    victim.kill()
    return victim.name


@pytest.mark.timeout(90)
def test_s1_worker_killed_during_model_call_resumes_on_another_worker(cluster: Cluster) -> None:
    cluster.start(2)
    cluster.start_reconciler()
    turn_id = submit({"call": "unsafe_effect", "args": {"label": "s1"}},
                     {"reply": "finished", "gate": "s1-model"})

    victim = kill_worker_at(cluster, "s1-model")  # blocked inside its second model call
    row = wait_terminal([turn_id], timeout=45)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.output_text == "finished"
    assert row.recovery_attempts == 1
    models = cluster.ledger("model", turn=turn_id)
    assert Counter(m["step"] for m in models) == {0: 1, 1: 2}, "one repeated model call at most"
    assert models[-1]["worker"] != victim, "the turn resumed on another worker"
    claims = cluster.ledger("event", type="turn.started", turn=turn_id)
    assert [c["worker"] == victim for c in claims] == [True, False]
    assert len(cluster.ledger("effect", turn=turn_id)) == 1, "a committed tool result is not re-run"
    assert_scenario_invariants(cluster)


def crash_inside_tool(cluster: Cluster, tool: str) -> tuple[Turn, ToolExecution]:
    """Run a turn calling ``tool`` once, SIGKILL its worker inside the tool, after the effect.

    Returns the finished turn and its one tool execution once the reconcile loop and the other
    worker have finished it.
    """
    cluster.start(2)
    cluster.start_reconciler()
    turn_id = submit({"call": tool, "args": {"label": tool, "hold": "in-tool"}},
                     {"reply": "after the crash"})
    kill_worker_at(cluster, "in-tool")  # the effect is in the ledger, the result not committed
    cluster.open_gate("in-tool")  # a re-run passes straight through (and shows in the ledger)
    row = wait_terminal([turn_id], timeout=45)[turn_id]
    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 1
    return row, ToolExecution.objects.get(turn_id=turn_id)


@pytest.mark.timeout(90)
def test_s2_worker_killed_inside_unsafe_tool_gives_outcome_unknown(cluster: Cluster) -> None:
    row, execution = crash_inside_tool(cluster, "unsafe_effect")

    assert execution.status == ToolStatus.INTERRUPTED
    assert execution.attempts == 1, "the tool was not re-run"
    assert len(cluster.ledger("effect", turn=row.pk)) == 1
    result = Message.objects.get(turn_id=row.pk, role="tool")
    assert result.content[0]["content"] == unknown_result()
    assert result.content[0]["is_error"] is True
    assert result.metadata.get("interrupted") is True
    # The model was asked again, seeing the "outcome unknown" result.
    assert Counter(m["step"] for m in cluster.ledger("model", turn=row.pk)) == {0: 1, 1: 1}
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(90)
def test_s2_worker_killed_before_an_unsafe_tool_starts_runs_it_once_after_recovery(
        cluster: Cluster) -> None:
    """TurnKit scenarios 5 and 51: the response and the call's intent committed, the worker dies
    before the tool starts: the call provably never ran, so the resumed turn runs it."""
    cluster.start(2)
    cluster.start_reconciler()
    turn_id = submit({"call": "unsafe_effect", "args": {"label": "s2b"}, "gate": "s2b-model"},
                     {"reply": "after the crash"})
    cluster.wait_ledger("gate.blocked", gate="s2b-model")
    (cluster.gates / f"start-{turn_id}.arm").touch()  # stop where the tool would start
    cluster.open_gate("s2b-model")
    kill_worker_at(cluster, f"start-{turn_id}")
    row = wait_terminal([turn_id], timeout=45)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 1
    execution = ToolExecution.objects.get(turn_id=turn_id)
    assert (execution.status, execution.attempts) == (ToolStatus.COMPLETED, 1)
    assert len(cluster.ledger("effect", turn=turn_id)) == 1, "run once, after the recovery"
    result = Message.objects.get(turn_id=turn_id, role="tool")
    assert result.content[0]["is_error"] is False
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(90)
def test_s3_worker_killed_inside_replay_safe_tool_reruns_with_same_key(cluster: Cluster) -> None:
    row, execution = crash_inside_tool(cluster, "safe_effect")

    assert execution.status == ToolStatus.COMPLETED
    assert execution.attempts == 2
    attempts = cluster.ledger("effect", turn=row.pk)
    assert len(attempts) == 2
    assert {a["key"] for a in attempts} == {execution.idempotency_key}, "same idempotency key"
    assert execution.result == "safe_effect: done"
    assert Counter(m["step"] for m in cluster.ledger("model", turn=row.pk)) == {0: 1, 1: 1}
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(90)
def test_s5_stopped_worker_past_its_lease_is_fenced_out(cluster: Cluster) -> None:
    cluster.start(2)
    cluster.start_reconciler()
    turn_id = submit({"reply": "answered", "gate": "s5-model"})

    blocked = cluster.wait_ledger("gate.blocked", gate="s5-model")[0]
    stale = cluster.worker(blocked["worker"])
    stale.pause()  # SIGSTOP: no heartbeat, the lease runs out
    row = wait_terminal([turn_id], timeout=45)[turn_id]
    assert row.status == TurnStatus.COMPLETED, row.error
    finished = cluster.ledger("model.done", turn=turn_id)
    assert [m["worker"] for m in finished] != [stale.name] and finished[-1]["worker"] != stale.name

    stale.resume()
    cluster.open_gate("s5-model")
    # The old worker gets its model answer and tries to record it: LostClaim, nothing written.
    cluster.wait_ledger("model.done", turn=turn_id, worker=stale.name)
    wait_for(lambda: [d for d in cluster.run_turn_deliveries(turn_id, "task.postrun")
                      if d["worker"] == stale.name],
             timeout=30, what="the stale worker's run_turn to return")

    after = Turn.objects.get(pk=turn_id)
    assert (after.status, after.output_text, after.fence) == (row.status, row.output_text,
                                                              row.fence)
    revoked = [entry["fence"] for entry in after.fence_log]
    assert len(revoked) == 1 and after.fence_log[0]["reason"] == "lease expired"
    assert not Message.objects.filter(turn_id=turn_id, fence__in=revoked).exists()
    assert Message.objects.filter(turn_id=turn_id, role="assistant").count() == 1
    assert len(cluster.ledger("event", type="turn.completed", turn=turn_id)) == 1
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_s12_poison_turn_is_dead_lettered_while_other_turns_flow(cluster: Cluster) -> None:
    workers = cluster.start(2)
    cluster.start_reconciler()
    poison = submit({"call": "poison"}, {"reply": "never"})
    others = [submit({"call": "safe_effect", "args": {"label": f"s12-{i}"}}, {"reply": "ok"})
              for i in range(4)]
    cluster.wait_ledger("poison", turn=poison)  # the first attempt killed its pool process
    later = [submit({"reply": f"later {i}"}) for i in range(2)]

    rows = wait_terminal([poison, *others, *later], timeout=90)

    limit = int(E2E_TURNKIT["MAX_RECOVERY_ATTEMPTS"])
    dead = rows[poison]
    assert dead.status == TurnStatus.FAILED
    assert dead.error["type"] == "DeadLetter"
    assert dead.recovery_attempts == limit + 1
    assert len(cluster.ledger("poison", turn=poison)) == limit + 1, "one death per attempt"
    assert all(rows[t].status == TurnStatus.COMPLETED for t in [*others, *later])
    assert all(w.alive() for w in workers), "the workers replace their killed pool processes"
    assert_scenario_invariants(cluster)
