"""Many live turns per worker: a turn holds no database session while it waits on a model.

One ``celery worker --pool threads`` process runs many turns at once, with Django's connection
pool (psycopg's) capped far below the number of turns. Every turn's model call waits at a hold
(stopping every process that reaches it) until the test releases them: all of them are in
their model call at the same moment while the worker holds no more sessions than the pool
allows, because a turn hands its session back before each wait (store.sessions). Then every
turn completes and the invariants hold.
"""

from __future__ import annotations

import pytest
from django.db import connection

from tests.e2e.harness import Cluster, submit, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from turnkit_django.states import TurnStatus

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
