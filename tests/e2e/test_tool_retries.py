"""Durable tool retries on real Celery workers (issue 39, done-when 2).

``flaky_effect`` (tests/testapp/agents.py) is a replay-safe tool with ``retries=3`` in front of a
service whose first calls time out; every call is an ``effect`` in the ledger, numbered per
idempotency key, so the ledger counts how often the tool really ran whatever turnkit recorded.
A worker is SIGKILLed between attempts (during the backoff, or inside an attempt held at a gate),
or asked to shut down (SIGTERM) during a long backoff; another worker finishes the turn from the
attempts recorded on the tool execution (``attempt_log``).
"""

from __future__ import annotations

import signal
from datetime import datetime

import pytest

from tests.e2e.harness import Cluster, submit, wait_for, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from tests.testapp.agents import flaky_effect
from turnkit_django.base.states import ToolStatus, TurnStatus
from turnkit_django.models import Message, ToolExecution, Turn

pytestmark = pytest.mark.django_db(transaction=True)


def recorded_attempts(turn_id: str) -> list[int]:
    execution = ToolExecution.objects.filter(turn_id=turn_id).first()
    return [a["attempt"] for a in (execution.attempt_log if execution else None) or []]


def tool_result(turn_id: str) -> dict:
    (message,) = Message.objects.filter(turn_id=turn_id, kind="tool_result")
    return message.content[0]


@pytest.mark.timeout(120)
def test_a_tool_failing_twice_succeeds_on_its_third_attempt_on_a_worker(cluster: Cluster) -> None:
    cluster.start(1)
    cluster.start_reconciler()
    turn_id = submit({"call": "flaky_effect", "args": {"label": "rates"}}, {"reply": "done"})
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 0
    execution = ToolExecution.objects.get(turn_id=turn_id)
    assert (execution.status, execution.attempts) == (ToolStatus.COMPLETED, 3)
    assert [(a["attempt"], a["error"]["error"]) for a in execution.attempt_log] == [
        (1, "TimeoutError"), (2, "TimeoutError")]
    effects = cluster.ledger("effect", turn=turn_id)
    assert [e["attempt"] for e in effects] == [1, 2, 3]
    assert {e["key"] for e in effects} == {execution.idempotency_key}
    assert tool_result(turn_id)["content"] == "rates: done at call 3"
    assert len(cluster.ledger("event", type="tool.retrying", turn=turn_id)) == 2
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_a_worker_killed_during_the_backoff_continues_from_the_recorded_attempt(
        cluster: Cluster) -> None:
    """SIGKILL while the worker waits the backoff after attempt 1: the other worker (after
    recovery) runs attempts 2 and 3, not 1 to 3 again."""
    cluster.start(2)
    cluster.start_reconciler()
    turn_id = submit({"call": "flaky_effect", "args": {"label": "backoff"}}, {"reply": "done"})
    wait_for(lambda: recorded_attempts(turn_id) == [1], timeout=45,
             what="attempt 1 recorded (the 2 s backoff starts)")
    (first,) = cluster.ledger("effect", turn=turn_id)
    victim = cluster.worker(first["worker"])
    victim.kill()
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 1
    effects = cluster.ledger("effect", turn=turn_id)
    assert [e["attempt"] for e in effects] == [1, 2, 3], "no attempt repeated"
    assert [e["worker"] == victim.name for e in effects] == [True, False, False], (
        "killed during the backoff, before attempt 2")
    execution = ToolExecution.objects.get(turn_id=turn_id)
    assert execution.status == ToolStatus.COMPLETED
    assert [a["attempt"] for a in execution.attempt_log] == [1, 2]
    assert len(effects) <= flaky_effect.retries + 1
    assert tool_result(turn_id)["content"] == "backoff: done at call 3"
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(120)
def test_a_worker_killed_inside_the_second_attempt_reruns_only_that_attempt(
        cluster: Cluster) -> None:
    """SIGKILL inside attempt 2 (held at a gate after its call reached the service): its
    outcome was never recorded, so the resumed turn runs attempt 2 again with the same key; the
    log keeps attempt 1 and the runs stay within retries + 1."""
    cluster.start(2)
    cluster.start_reconciler()
    turn_id = submit({"call": "flaky_effect",
                      "args": {"label": "inside", "hold": "attempt2", "hold_at": 2}},
                     {"reply": "done"})
    (blocked,) = cluster.wait_ledger("gate.blocked", turn=turn_id, attempt=2)
    assert recorded_attempts(turn_id) == [1]
    victim = cluster.worker(blocked["worker"])
    victim.kill()
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 1
    execution = ToolExecution.objects.get(turn_id=turn_id)
    assert execution.status == ToolStatus.COMPLETED
    assert [a["attempt"] for a in execution.attempt_log] == [1], "the killed attempt left no entry"
    effects = cluster.ledger("effect", turn=turn_id)
    assert [(e["attempt"], e["worker"] == victim.name) for e in effects] == [
        (1, True), (2, True), (3, False)]
    assert {e["key"] for e in effects} == {execution.idempotency_key}
    assert len(effects) <= flaky_effect.retries + 1
    assert tool_result(turn_id)["content"] == "inside: done at call 3"
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(150)
def test_sigterm_during_a_long_backoff_hands_the_turn_back_at_once(cluster: Cluster) -> None:
    """A warm shutdown (SIGTERM to the worker's process group) during the 15 s backoff: the
    worker does not wait it out; it hands the turn back (no recovery counted) and exits while
    the next attempt is still due later; another worker waits the rest, then attempt 2."""
    (worker,) = cluster.start(1)
    cluster.start_reconciler()
    turn_id = submit({"call": "slow_retry_effect", "args": {"label": "slow"}}, {"reply": "done"})
    wait_for(lambda: recorded_attempts(turn_id) == [1], timeout=45,
             what="attempt 1 recorded (the 15 s backoff starts)")
    due = datetime.fromisoformat(
        ToolExecution.objects.get(turn_id=turn_id).attempt_log[0]["retry_at"])

    worker.signal(signal.SIGTERM)  # main process and pool child, as systemd does
    wait_for(lambda: not worker.alive(), timeout=10, what="the worker to shut down")
    exited = Turn.objects.get(pk=turn_id)
    execution = ToolExecution.objects.get(turn_id=turn_id)
    assert datetime.now(due.tzinfo) < due, "the worker exited before the backoff ended"
    assert (exited.status, exited.claimed_by, exited.recovery_attempts) == ("pending", "", 0)
    assert execution.status == ToolStatus.PENDING
    assert len(cluster.ledger("event", type="turn.handed_back", turn=turn_id)) == 1

    cluster.start(1)
    row = wait_terminal([turn_id], timeout=60)[turn_id]
    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 0
    effects = cluster.ledger("effect", turn=turn_id)
    assert [e["attempt"] for e in effects] == [1, 2]
    assert effects[1]["t"] >= due.timestamp() - 0.05, "the rest of the backoff was waited"
    execution.refresh_from_db()
    assert (execution.status, execution.attempts) == (ToolStatus.COMPLETED, 2)
    assert tool_result(turn_id)["content"] == "slow: done at call 2"
    assert_scenario_invariants(cluster)
