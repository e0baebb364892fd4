"""A hung tool or model call stops keeping its turn alive (issue 10, item 8).

A call past its timeout (``@tool(timeout=...)``, ``TOOL_TIMEOUT``, ``MODEL_TIMEOUT``) or past the
tree's deadline stops renewing its lease, so reconcile recovers the turn as it would a dead
worker's: another worker resumes it (the hung call's outcome is unknown) or fails it on the
deadline; the hung worker's late writes are fenced out.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

import turnkit_django
from tests.concurrency.threads import TIMEOUT, Worker, wait_until
from tests.dispatch import override_turnkit
from turnkit_django import Agent, services, tool
from turnkit_django.base.error_records import unknown_result
from turnkit_django.models import Turn
from turnkit_django.store.controls import extend_deadline
from turnkit_django.store.locks import database_now
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

FAST = {"HEARTBEAT_INTERVAL": 0.1, "LEASE": 0.5, "RECONCILE_INTERVAL": 0.2}


def recovered(turn_id: str) -> bool:
    return turn_id in turnkit_django.reconcile().recovered


@contextmanager
def in_flight(agent: Agent, entered: threading.Event,
              release: threading.Event) -> Iterator[tuple[Any, list[object]]]:
    """Submit ``agent``'s turn and run it on a worker thread until its call is in flight
    (``entered``); on exit release the call and keep the worker's outcome in the list."""
    outcome: list[object] = []
    with override_turnkit(**FAST):
        run = agent.submit("go")
        stuck = Worker(services.run_turn, run.id, kind="test")
        stuck.start()
        try:
            assert entered.wait(TIMEOUT)
            yield run, outcome
        finally:
            release.set()
            outcome.append(stuck.outcome())


def test_a_tool_past_its_timeout_is_recovered_with_an_unknown_outcome(registered):
    entered, release = threading.Event(), threading.Event()
    effects: list[str] = []

    @tool(timeout=0.3)
    def hang(ctx) -> str:
        """Never return in time."""
        effects.append(ctx.idempotency_key)
        entered.set()
        assert release.wait(TIMEOUT)
        return "too late"

    def respond(request):
        if request.last_message_is_tool_result():
            return reply(str(request.messages[-1].tool_results[0].content["error"]))
        return call("hang", id="call_hang")

    agent = registered(Agent("hanger", tools=[hang], client=FunctionClient(respond)))
    with in_flight(agent, entered, release) as (run, outcome):
        wait_until(lambda: recovered(run.id), timeout=10,
                   what="reconcile to take the hung turn back")
        assert services.run_turn(run.id, kind="test")  # another worker resumes it
    assert outcome == [True]  # the hung worker returns and writes nothing

    row = Turn.objects.get(pk=run.id)
    assert (row.status, row.output_text) == ("completed", "outcome_unknown")
    assert row.recovery_attempts == 1 and len(effects) == 1
    (execution,) = row.tool_executions.all()
    assert execution.status == "interrupted" and execution.error == unknown_result()


def test_a_model_call_hung_past_the_deadline_fails_the_turn_on_the_deadline(registered):
    entered, release = threading.Event(), threading.Event()

    def respond(request):
        entered.set()
        assert release.wait(TIMEOUT)
        return reply("too late")

    client = FunctionClient(respond)
    agent = registered(Agent("slowpoke", client=client, timeout=0.5))
    with in_flight(agent, entered, release) as (run, _outcome):
        wait_until(lambda: recovered(run.id), timeout=10,
                   what="reconcile to take the turn back after its deadline")
        assert services.run_turn(run.id, kind="test")

    row = Turn.objects.get(pk=run.id)
    assert row.status == "failed" and row.error["limit"] == "timeout"
    assert len(client.requests) == 1  # the resumed turn did not ask the model again


def test_a_call_within_its_timeout_keeps_its_lease(registered):
    @tool(timeout=30)
    def quick(ctx) -> str:
        """Return at once."""
        return "done"

    def respond(request):
        return reply("ok") if request.last_message_is_tool_result() else call("quick")

    agent = registered(Agent("quick", tools=[quick], client=FunctionClient(respond)))
    with override_turnkit(**FAST):
        run = agent.submit("go")
        assert services.run_turn(run.id, kind="test")
    assert Turn.objects.get(pk=run.id).recovery_attempts == 0


def test_a_call_keeps_its_lease_when_the_trees_deadline_moved_later_meanwhile(registered):
    """The deadline a worker holds in memory is the one its turn had when it was read; a pause's
    resume or a decided approval elsewhere in the tree moves it later in the database
    (``store.controls.extend_deadline``). A call still in flight past the old deadline keeps its
    lease: the heartbeat reads the deadline again before it gives the call up."""
    entered, release = threading.Event(), threading.Event()

    def respond(request):
        entered.set()
        assert release.wait(TIMEOUT)
        return reply("in time")

    agent = registered(Agent("extended", client=FunctionClient(respond), timeout=0.5))
    with in_flight(agent, entered, release) as (run, outcome):
        first = Turn.objects.get(pk=run.id).deadline_at
        extend_deadline(run.id, timedelta(hours=1))
        # Past the old deadline and several leases after it, the turn is still held.
        wait_until(lambda: database_now() > first + timedelta(seconds=2), timeout=10,
                   what="the old deadline and a few leases to pass")
        assert not recovered(run.id)
    assert outcome == [True]
    row = Turn.objects.get(pk=run.id)
    assert (row.status, row.output_text, row.recovery_attempts) == ("completed", "in time", 0)
