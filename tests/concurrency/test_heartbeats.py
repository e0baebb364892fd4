"""Heartbeats never wait on the tree lock (issue 10, item 7).

Another session holding the root turn's row lock for longer than the lease (an operator's shell,
a long migration, a report with ``select_for_update``) must not make a live worker look dead:
its heartbeats keep landing, reconcile finds the lease fresh once it gets the lock, and the
turn finishes without a recovery and without a second model request.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections, transaction

import turnkit_django
from tests.concurrency.threads import TIMEOUT, Worker, wait_until
from tests.dispatch import override_turnkit
from turnkit_django import Agent, services, tool
from turnkit_django.models import Turn
from turnkit_django.store import lease_of
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

LEASE = 1.5


def hold_row_lock(turn_id: str, taken: threading.Event, release: threading.Event) -> None:
    """What another session does: lock the turn's row and keep it until told."""
    with transaction.atomic():
        Turn.objects.select_for_update().get(pk=turn_id)
        taken.set()
        assert release.wait(TIMEOUT)


def slow_until(started: Callable[[], object], done: threading.Event) -> Any:
    """A tool ``slow`` that calls ``started`` and returns once ``done`` is set."""

    @tool
    def slow(ctx) -> str:
        """Take a while."""
        started()
        assert done.wait(TIMEOUT)
        return "finished"

    return slow


def respond(request):
    return reply("ok") if request.last_message_is_tool_result() else call("slow")


def test_a_live_worker_keeps_its_lease_while_another_session_holds_the_row_lock(registered):
    in_tool, done = threading.Event(), threading.Event()
    client = FunctionClient(respond)
    agent = registered(Agent("steady", tools=[slow_until(in_tool.set, done)], client=client))
    taken, release = threading.Event(), threading.Event()
    with override_turnkit(HEARTBEAT_INTERVAL=0.2, LEASE=LEASE, RECONCILE_INTERVAL=0.5):
        run = agent.submit("go")
        worker = Worker(services.run_turn, run.id, kind="test")
        worker.start()
        try:
            assert in_tool.wait(TIMEOUT)
            holder = Worker(hold_row_lock, run.id, taken, release)
            holder.start()
            assert taken.wait(TIMEOUT)
            first = lease_of(run.id)
            # For longer than the lease, heartbeats go on landing despite the held row lock.
            wait_until(lambda: (lease_of(run.id) - first).total_seconds() > LEASE,
                       timeout=LEASE * 6, what="heartbeats while the row lock is held")
            release.set()
            holder.outcome()
            report = turnkit_django.reconcile()
        finally:
            release.set()
            done.set()
        assert worker.outcome() is True

    assert report.recovered == [] and report.errors == []
    row = Turn.objects.get(pk=run.id)
    assert (row.status, row.recovery_attempts) == ("completed", 0)
    assert len(client.requests) == 2


def test_turns_executing_at_once_are_beaten_for_by_one_thread(registered):
    """Every turn of a process is kept alive by the process's one heartbeat thread: two turns
    in their tools at once both keep their leases fresh, and no thread is started per turn."""
    in_tool, done = threading.Barrier(3, timeout=TIMEOUT), threading.Event()
    agent = registered(Agent("steady-pair", tools=[slow_until(in_tool.wait, done)],
                             client=FunctionClient(respond)))
    with override_turnkit(HEARTBEAT_INTERVAL=0.1):
        runs = [agent.submit("go"), agent.submit("go")]
        workers = [Worker(services.run_turn, run.id, kind="test") for run in runs]
        for worker in workers:
            worker.start()
        try:
            in_tool.wait()
            first = [lease_of(run.id) for run in runs]
            for run, then in zip(runs, first, strict=True):
                wait_until(lambda run=run, then=then: lease_of(run.id) > then, timeout=TIMEOUT,
                           what=f"a heartbeat of {run.id}")
            beating = [t for t in threading.enumerate() if t.name == "turnkit-heartbeat"]
            assert len(beating) == 1
        finally:
            done.set()
        assert [worker.outcome() for worker in workers] == [True, True]


def _beating_sessions() -> set[int]:
    """The sessions whose last statement was a heartbeat (``UPDATE turnkit_lease``)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
                       "AND pid <> pg_backend_pid() AND query LIKE %s",
                       ['UPDATE "turnkit_lease" SET "heartbeat_at"%'])
        return {pid for (pid,) in cursor.fetchall()}


@pytest.mark.parametrize("max_age", [0, 600])
def test_the_heartbeat_keeps_a_session_only_as_conn_max_age_allows_and_only_while_it_beats(
        registered, monkeypatch, max_age):
    """The heartbeat thread treats its session as Django treats a request's: with
    ``CONN_MAX_AGE = 0`` (Django's default) it closes it after each beat, with a positive value
    the beats share one session. Either way no session of it is left once no turn remains to
    beat for (docs/howto/celery.md, "Database connections")."""
    monkeypatch.setitem(connections.settings["default"], "CONN_MAX_AGE", max_age)
    in_tool, done = threading.Event(), threading.Event()
    agent = registered(Agent("steady-session", tools=[slow_until(in_tool.set, done)],
                             client=FunctionClient(respond)))
    with override_turnkit(HEARTBEAT_INTERVAL=0.3):
        run = agent.submit("go")
        worker = Worker(services.run_turn, run.id, kind="test")
        worker.start()
        try:
            assert in_tool.wait(TIMEOUT)
            after_beats = []
            for _ in range(3):
                then = lease_of(run.id)
                wait_until(lambda then=then: lease_of(run.id) > then, timeout=TIMEOUT,
                           what="a heartbeat")
                after_beats.append(_beating_sessions())
            if not max_age:  # between two beats, no session of the heartbeat
                wait_until(lambda: not _beating_sessions(), timeout=TIMEOUT,
                           what="the heartbeat's session to close after its beat")
        finally:
            done.set()
        assert worker.outcome() is True

    if max_age:
        assert len(set().union(*after_beats)) == 1 and all(after_beats), after_beats
    wait_until(lambda: not _beating_sessions(), timeout=TIMEOUT,
               what="the heartbeat's session to close once its turn ended")


def test_the_heartbeat_thread_takes_its_session_before_any_claims_lock(registered):
    """With Django's connection pool, a turn ending holds its session while it waits for its
    claim's beat lock (Heartbeat.__exit__); a beat that held that lock while it waited for a
    pooled session deadlocked with it until the pool's timeout (every turn of a threads worker
    stalled 60 s, issue 37). A beat takes its session first, then the claims' locks."""
    agent = registered(Agent("beat-order", client=FunctionClient(lambda r: reply("ok"))))
    run = agent.prepare("a turn")
    from turnkit_django.runtime import heartbeat
    from turnkit_django.store import claim

    beat = heartbeat.Heartbeat(claim(run.id, "a worker"), 60.0)
    wrappers: list[Any] = []

    def beat_all() -> None:
        wrappers.append(connections["default"])  # this thread's own connection
        connection.close()  # no session yet, as after a turn's wait
        heartbeat.beat_all([beat])

    with beat._beating:  # a turn ending, its session held, reached the lock first
        thread = Worker(beat_all)
        thread.start()
        # The beat thread opens its session while it waits for the lock, not after.
        wait_until(lambda: bool(wrappers) and wrappers[0].connection is not None,
                   timeout=5, what="the heartbeat thread's session before the claim's lock")
    thread.outcome()
    run.cancel()
