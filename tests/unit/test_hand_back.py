"""A worker asked to stop hands its turn back at the next step boundary (issue 10, item 6)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.dispatch import recorded
from turnkit_django import Agent, services, tool
from turnkit_django.base import shutdown
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]

ran: list[str] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    ran.clear()
    yield
    shutdown.reset()


@tool
def first(ctx) -> str:
    """The step during which the worker is told to stop."""
    ran.append("first")
    shutdown.request_stop()  # as the SIGTERM handler does, mid-tool
    return "first done"


@tool
def second(ctx) -> str:
    """The step after."""
    ran.append("second")
    return "second done"


def test_the_step_in_progress_finishes_and_the_turn_is_handed_back(
        registered, django_capture_on_commit_callbacks):
    client = ScriptedClient([[call("first", id="c1"), call("second", id="c2")], reply("done")])
    agent = registered(Agent("stoppable", tools=[first, second], client=client))
    run = agent.submit("go")
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(run.id, kind="test")

    row = Turn.objects.get(pk=run.id)
    assert (row.status, row.claimed_by, row.recovery_attempts) == ("pending", "", 0)
    assert ran == ["first"]
    executions = {e.tool_call_id: e.status for e in ToolExecution.objects.filter(turn=row)}
    # The second call's intent had been written with the first one's result; it never started.
    assert executions == {"c1": "completed", "c2": "pending"}
    assert run.id in recorded()  # handed back: the doorbell rings for another worker

    shutdown.reset()  # another worker
    assert services.run_turn(run.id, kind="test")
    assert run.refresh().status == "completed"
    assert ran == ["first", "second"]


def test_a_call_handed_back_before_it_started_is_not_executed_when_the_turn_is_cancelled(
        registered):
    client = ScriptedClient([[call("first", id="c1"), call("second", id="c2")], reply("done")])
    run = registered(Agent("stopped-then-cancelled", tools=[first, second], client=client)
                     ).submit("go")
    assert services.run_turn(run.id, kind="test")
    assert ToolExecution.objects.get(tool_call_id="c2").attempts == 0  # put back, never run

    run.cancel()
    second_call = ToolExecution.objects.get(tool_call_id="c2")
    assert (second_call.status, second_call.result["error"]) == ("cancelled", "not_executed")
    assert ran == ["first"]


def test_inline_turns_are_not_handed_back():
    client = ScriptedClient([call("first", id="c1"), reply("done")])
    run = Agent("inline_stop", tools=[first], client=client).run("go")
    assert run.status == "completed"
