"""The tasks' connection lifecycle (docs/howto/celery.md, "Database connections") on PostgreSQL.

In a worker, turnkit's tasks close stale sessions before and after themselves, as Django does
around a request (tests/e2e/test_setup.py runs that in a real worker). Called in the caller's
process they must leave the caller's connection alone, even inside the caller's transaction.
"""

from __future__ import annotations

import os
import signal
import threading

import pytest
from django.contrib.auth.models import Group
from django.db import close_old_connections, connection

import turnkit_django.tasks as tasks
from turnkit_django.store.locks import read_ledger

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("how", ["direct call", "apply"])
def test_a_task_run_in_the_callers_process_leaves_the_callers_connection_alone(how: str) -> None:
    group = Group.objects.create(name="before the task")  # in the test's transaction
    session = connection.connection

    if how == "direct call":
        tasks.maintain()
    else:
        tasks.maintain.apply().get()

    assert connection.connection is session
    assert not connection.needs_rollback
    assert Group.objects.filter(pk=group.pk).exists()


class _SoftLimit(Exception):
    """What Celery's soft time limit raises in the task, from a signal handler."""


@pytest.mark.django_db(transaction=True)
def test_a_session_left_mid_query_by_a_soft_time_limit_is_replaced_before_the_next_query(
        ) -> None:
    """Celery stopped keeping sessions across tasks by default because a soft time limit can
    interrupt a query and leave the session busy (celery/celery#9824). With the setup the docs
    give for a kept session (``CONN_MAX_AGE`` and ``CONN_HEALTH_CHECKS``), the health check
    before the next task's first statement finds it busy and Django connects again: the next
    task runs. This holds for turnkit's server-bound hot statements too."""
    saved = {key: connection.settings_dict[key] for key in ("CONN_MAX_AGE",
                                                             "CONN_HEALTH_CHECKS")}
    connection.settings_dict.update(CONN_MAX_AGE=600, CONN_HEALTH_CHECKS=True)
    connection.close()
    interrupted = None
    try:
        interrupted = _backend_pid()

        def soft_limit(signum: int, frame: object) -> None:
            raise _SoftLimit()

        # Celery's prefork pool signals a soft time limit with SIGUSR1, as this timer does.
        previous = signal.signal(signal.SIGUSR1, soft_limit)
        timer = threading.Timer(0.2, os.kill, (os.getpid(), signal.SIGUSR1))
        timer.start()
        try:
            with pytest.raises(_SoftLimit), connection.cursor() as cursor:
                cursor.execute("SELECT pg_sleep(30)")
        finally:
            timer.cancel()
            signal.signal(signal.SIGUSR1, previous)
        close_old_connections()  # what turnkit's tasks run after themselves in a worker
        assert read_ledger("turn_missing") is None  # a hot statement (server-bound) first
        assert _backend_pid() != interrupted  # a new session, not the busy one
    finally:
        connection.settings_dict.update(saved)
        connection.close()
        if interrupted is not None:  # the old session still sleeps on the server
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [interrupted])


def _backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])
