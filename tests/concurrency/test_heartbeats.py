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
from django.db import transaction

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
