"""Setup that just works (issue 14): a worker set up the usual way runs background turns."""

from __future__ import annotations

import pytest
from django.db import connection

from tests.e2e.harness import Cluster, Worker, submit, wait_for, wait_terminal
from turnkit_django.base.states import TurnStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.timeout(90)
def test_a_worker_whose_celery_module_only_autodiscovers_runs_a_background_turn(
    cluster: Cluster,
) -> None:
    (worker,) = cluster.start(1, app="tests.e2e.autodiscover_celery")
    banner = worker.log.read_text(errors="replace")
    assert "[tasks]" in banner and ". turnkit.run_turn" in banner, banner

    turn_id = submit({"call": "safe_effect", "args": {"label": "autodiscover"}},
                     {"reply": "found by autodiscover"})
    row = wait_terminal([turn_id], timeout=45)[turn_id]

    assert row.status == TurnStatus.COMPLETED, (row.error, cluster.logs())
    assert row.output_text == "found by autodiscover"
    assert "Received unregistered task" not in worker.log.read_text(errors="replace")


def _idle_sessions(application_name: str) -> list[int]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND application_name = %s AND state = 'idle'", [application_name])
        return [pid for (pid,) in cursor.fetchall()]


def _tasks_done(worker: Worker) -> int:
    return worker.log.read_text(errors="replace").count("] succeeded in ")


@pytest.mark.timeout(120)
def test_a_worker_that_keeps_its_connection_reconnects_when_the_database_closed_it(
    cluster: Cluster,
) -> None:
    """docs/howto/celery.md's connection reuse (``CELERY_DB_REUSE_MAX`` with ``CONN_MAX_AGE``
    and ``CONN_HEALTH_CHECKS``): the worker keeps its session between turns, and when the
    database ends that session between two turns (a restart, a failover, an idle timeout), the
    next turn checks it, connects again and completes, on its first delivery."""
    (worker,) = cluster.start(1, app="tests.e2e.autodiscover_celery",
                              env={"TURNKIT_E2E_KEEP_CONNECTIONS": "1"})
    first = submit({"reply": "first"})
    assert wait_terminal([first], timeout=45)[first].status == TurnStatus.COMPLETED
    wait_for(lambda: _tasks_done(worker) == 1, timeout=15, what="the first task to end")
    kept = wait_for(lambda: _idle_sessions(f"turnkit-e2e-{worker.name}"), timeout=15,
                    what="the worker's session to outlive its task")
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(pg_terminate_backend(pid)) FROM unnest(%s::int[]) AS pid",
                       [kept])

    second = submit({"reply": "second"})
    row = wait_terminal([second], timeout=30)[second]
    wait_for(lambda: _tasks_done(worker) == 2, timeout=15, what="the second task to end")

    assert row.status == TurnStatus.COMPLETED, (row.error, cluster.logs())
    log = worker.log.read_text(errors="replace")
    assert log.count("Task turnkit.run_turn[") == 4, log  # two received, two succeeded
    assert "OperationalError" not in log and "InterfaceError" not in log, log
