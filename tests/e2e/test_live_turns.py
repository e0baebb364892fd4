"""Many live turns per worker: a turn holds no database session while it waits on a model.

One ``celery worker --pool threads`` process runs many turns at once, with Django's connection
pool (psycopg's) capped far below the number of turns. Every turn's model call waits at a hold
(stopping every process that reaches it) until the test releases them: all of them are in
their model call at the same moment while the worker holds no more sessions than the pool
allows, because a turn hands its session back before each wait (store.sessions). Then every
turn completes and the invariants hold.
"""

from __future__ import annotations

import signal
from collections import Counter

import pytest
from django.db import connection

from tests.e2e.harness import Cluster, Worker, submit, wait_for, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)

TURNS = 24
POOL = 4


def worker_sessions(name: str) -> int:
    """The sessions the worker ``name`` holds now (its application_name, tests/e2e)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity WHERE application_name = %s",
                       [f"turnkit-e2e-{name}"])
        return int(cursor.fetchone()[0])


@pytest.mark.timeout(180)
def test_a_threads_worker_runs_more_live_turns_than_its_pool_has_sessions(
        cluster: Cluster) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the pool is psycopg's")
    held = cluster.gates / "live-model.hold"
    held.touch()
    (worker,) = cluster.start(1, pool="threads", concurrency=TURNS,
                              env={"TURNKIT_E2E_DB_POOL": str(POOL)})
    ids = [submit({"call": "safe_effect", "args": {"label": f"live-{i}"}, "hold": "live-model"},
                  {"reply": "done"}) for i in range(TURNS)]

    # Every turn is in its model call at once: none waits for a session to get there.
    cluster.wait_ledger("hold.waiting", count=TURNS, timeout=90)
    assert worker_sessions(worker.name) <= POOL
    held.unlink()

    rows = wait_terminal(ids, timeout=90)
    assert {row.status for row in rows.values()} == {TurnStatus.COMPLETED}
    assert worker_sessions(worker.name) <= POOL
    assert_scenario_invariants(cluster)


def held_in_second_model_call(cluster: Cluster, hold: str) -> tuple[Worker, list[str]]:
    """A threads worker on a pool of POOL sessions with TURNS turns of model, tool (not
    replay-safe: it must not run twice), model (held), tool, model; each held inside its
    second model call."""
    (cluster.gates / f"{hold}.hold").touch()
    (worker,) = cluster.start(1, pool="threads", concurrency=TURNS,
                              env={"TURNKIT_E2E_DB_POOL": str(POOL)})
    ids = [submit({"call": "unsafe_effect", "args": {"label": f"{hold}-{i}"}},
                  {"call": "safe_effect", "args": {"label": f"{hold}-after-{i}"}, "hold": hold},
                  {"reply": "done"}) for i in range(TURNS)]
    cluster.wait_ledger("hold.waiting", count=TURNS, timeout=90)
    return worker, ids


def assert_each_ran_once(cluster: Cluster, ids: list[str]) -> None:
    """Every turn completed; no tool that is not replay-safe ran twice, and no committed model
    response was requested again (step 0: once per turn)."""
    rows = wait_terminal(ids, timeout=120)
    assert {row.status for row in rows.values()} == {TurnStatus.COMPLETED}, {
        row.pk: row.error for row in rows.values() if row.status != TurnStatus.COMPLETED}
    effects = Counter(entry["turn"] for entry in cluster.ledger("effect", tool="unsafe_effect"))
    assert all(effects[turn_id] == 1 for turn_id in ids), effects
    first = Counter(m["turn"] for m in cluster.ledger("model") if m["step"] == 0)
    assert all(first[turn_id] == 1 for turn_id in ids), first
    assert_scenario_invariants(cluster)


@pytest.mark.timeout(240)
def test_sigkill_of_a_threads_worker_holding_many_live_turns_loses_none(
        cluster: Cluster) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the pool is psycopg's")
    worker, ids = held_in_second_model_call(cluster, "live-kill")
    worker.kill()  # every live turn of the process dies at once, mid model call
    (cluster.gates / "live-kill.hold").unlink()
    cluster.start(1, pool="threads", concurrency=TURNS, env={"TURNKIT_E2E_DB_POOL": str(POOL)})
    cluster.start_reconciler()

    assert_each_ran_once(cluster, ids)
    assert all(row.recovery_attempts == 1 for row in Turn.objects.filter(pk__in=ids))


@pytest.mark.timeout(240)
def test_sigterm_of_a_threads_worker_hands_every_live_turn_back(cluster: Cluster) -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the pool is psycopg's")
    worker, ids = held_in_second_model_call(cluster, "live-term")
    worker.signal(signal.SIGTERM)  # warm shutdown: each turn stops at its next step boundary
    (cluster.gates / "live-term.hold").unlink()
    wait_for(lambda: not worker.alive(), timeout=60, what="the threads worker to shut down")
    cluster.start(1, pool="threads", concurrency=TURNS, env={"TURNKIT_E2E_DB_POOL": str(POOL)})

    assert_each_ran_once(cluster, ids)
    # Handed back, not recovered: no lease had to expire, and the stopping worker started no
    # model call after the one it was in.
    assert all(row.recovery_attempts == 0 for row in Turn.objects.filter(pk__in=ids))
    last = [m for m in cluster.ledger("model") if m["step"] == 2 and m["turn"] in ids]
    assert last and all(m["worker"] != worker.name for m in last), last
