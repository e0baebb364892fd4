"""``run.wait()`` on PostgreSQL (issue 40): it sees another worker's commit, and holds no
database session while it sleeps between its checks."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection, connections

from tests.integration.test_event_stream_sessions import sessions, settled
from turnkit_django import Agent, services
from turnkit_django.services import awaiting
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


@pytest.fixture
def postgresql() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("races a worker thread and counts PostgreSQL sessions")


@pytest.fixture
def threads() -> Iterator[Callable[[Callable[[], Any]], Callable[[], Any]]]:
    """``start(work)`` runs ``work`` in a thread (its connections closed after it) and returns
    ``result()``, which joins it and returns what ``work`` returned (or raises what it raised)."""
    started: list[threading.Thread] = []

    def start(work: Callable[[], Any]) -> Callable[[], Any]:
        outcome: list[Any] = []

        def target() -> None:
            try:
                outcome.append(work())
            except BaseException as error:
                outcome.append(error)
            finally:
                connections.close_all()
        thread = threading.Thread(target=target)
        thread.start()
        started.append(thread)

        def result() -> Any:
            thread.join(10)
            assert outcome, "the thread did not finish"
            if isinstance(outcome[0], BaseException):
                raise outcome[0]
            return outcome[0]
        return result

    yield start
    for thread in started:
        thread.join(10)


def test_wait_sees_the_commit_of_a_worker_running_at_the_same_time(registered, monkeypatch,
                                                                   postgresql, threads):
    slept = threading.Event()
    real_sleep = awaiting.sleep

    def sleep(seconds: float) -> None:
        slept.set()
        real_sleep(seconds)

    def respond(request: Any) -> Any:
        assert slept.wait(10), "the caller never waited"
        return reply("done")

    monkeypatch.setattr(awaiting, "sleep", sleep)
    run = registered(Agent("raced", client=FunctionClient(respond))).submit("x")
    ran = threads(lambda: services.run_turn(run.id))
    assert run.wait(timeout=10).status == "completed" and run.output_text == "done"
    assert ran() is True


def test_a_waiting_caller_holds_no_database_session(registered, monkeypatch, postgresql,
                                                    threads):
    """Between its checks the caller's connection is closed (with a pool: returned)."""
    slept, go = threading.Event(), threading.Event()

    def sleep(seconds: float) -> None:  # asleep until the test has counted
        slept.set()
        assert go.wait(10)

    monkeypatch.setattr(awaiting, "sleep", sleep)
    run = registered(Agent("idle", client=FunctionClient(lambda r: reply("x")))).submit("x")
    before = sessions()
    waited = threads(lambda: run.wait(timeout=30))
    assert slept.wait(10)
    assert settled(before) <= before  # not one more for the waiting caller
    run.cancel()
    go.set()
    assert waited().status == "cancelled"
