"""Durable tool retries (issue 39): ``@tool(retries=, retry_on=, backoff=)``.

Each failed attempt is recorded on the tool execution (``attempt_log``) before the backoff is
waited (outside any transaction, the turn's session released), so a turn resumed after its
worker died continues from the recorded attempt count instead of starting again at 1. Crashes are
``SimulatedCrash`` (a BaseException the runtime does not catch), as in test_resume.py.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connections
from pydantic import BaseModel

import turnkit_django
from tests.helpers import expire_lease
from turnkit_django import Agent, Tool, services, tool
from turnkit_django.base import failpoints
from turnkit_django.base.failpoints import SimulatedCrash
from turnkit_django.events import Event
from turnkit_django.events import event as signal
from turnkit_django.exceptions import ConfigurationError
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.runtime import retries
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


class Flaky:
    """A rates service that times out ``failures`` times, then answers (or dies at a call)."""

    def __init__(self, failures: int, *, error: type[Exception] = TimeoutError,
                 die_at: int | None = None) -> None:
        self.failures, self.error, self.die_at = failures, error, die_at
        self.calls: list[str] = []

    def fetch(self, key: str) -> dict:
        self.calls.append(key)
        if self.die_at == len(self.calls):
            raise SimulatedCrash("the worker died during an attempt")
        if len(self.calls) <= self.failures:
            raise self.error(f"rates service timed out (call {len(self.calls)})")
        return {"rate": 1.1}


def rates_agent(registered: Any, service: Flaky, *, retries: int = 3,
                backoff: float = 0.0) -> tuple[Agent, ScriptedClient]:
    @tool(recovery="replay_safe", retries=retries, retry_on=(TimeoutError,), backoff=backoff)
    def fetch_rates(ctx, currency: str) -> dict:
        """Fetch exchange rates."""
        return service.fetch(ctx.idempotency_key)

    client = ScriptedClient([call("fetch_rates", id="call_rates", currency="EUR"),
                             reply("done")])
    return registered(Agent("rates", tools=[fetch_rates], client=client)), client


def tool_result(client: ScriptedClient) -> Any:
    message = client.requests[1].messages[-1]
    assert message.role == "tool"
    (result,) = message.tool_results
    return result


def test_a_tool_succeeds_on_its_third_attempt_after_two_retryable_failures(
        registered, valid_transcript, django_capture_on_commit_callbacks):
    service = Flaky(2)
    agent, client = rates_agent(registered, service, backoff=0.01)
    events: list[Event] = []

    def receiver(sender: Any, event: Event, **kwargs: Any) -> None:
        events.append(event)

    signal.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run = agent.run("rates please")
    finally:
        signal.disconnect(receiver)
    assert run.status == "completed", run.error
    result = tool_result(client)
    assert (result.is_error, result.content) == (False, {"rate": 1.1})
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert len(service.calls) == 3 and len(set(service.calls)) == 1  # one idempotency key
    assert (execution.status, execution.attempts) == ("completed", 3)
    assert [(a["attempt"], a["error"]["error"]) for a in execution.attempt_log] == [
        (1, "TimeoutError"), (2, "TimeoutError")]
    assert "call 2" in execution.attempt_log[1]["error"]["message"]
    retrying = [e.payload for e in events if e.type == "tool.retrying"]
    assert [(r["name"], r["attempt"]) for r in retrying] == [("fetch_rates", 1),
                                                             ("fetch_rates", 2)]
    assert 0.01 <= retrying[0]["wait"] <= 0.012 and 0.02 <= retrying[1]["wait"] <= 0.024
    assert valid_transcript(run.conversation_id) == [
        ("user", "text"), ("assistant", "tool_call"), ("tool", "tool_result"),
        ("assistant", "text")]


@pytest.mark.django_db(transaction=True)
def test_the_backoff_is_waited_outside_any_transaction(registered, monkeypatch):
    waits: list[tuple[float, bool]] = []
    monkeypatch.setattr(retries, "pause", lambda seconds, **kw: waits.append(
        (seconds, connections["default"].in_atomic_block)))
    agent, _ = rates_agent(registered, Flaky(2), backoff=2.0)
    assert agent.run("rates please").status == "completed"
    assert [atomic for _, atomic in waits] == [False, False]
    assert 2.0 <= waits[0][0] <= 2.4 and 4.0 <= waits[1][0] <= 4.8


def test_a_non_matching_exception_is_not_retried(registered):
    service = Flaky(5, error=ValueError)
    agent, client = rates_agent(registered, service)
    run = agent.run("rates please")
    assert run.status == "completed", run.error
    result = tool_result(client)
    assert result.is_error and result.content["error"] == "ValueError"
    assert len(service.calls) == 1
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert (execution.status, execution.attempts, execution.attempt_log) == ("failed", 1, [])


def test_exhausted_retries_are_a_tool_error_the_model_reads(registered):
    service = Flaky(10)
    agent, client = rates_agent(registered, service, retries=2)
    run = agent.run("rates please")
    assert run.status == "completed", run.error  # the turn goes on; the model read the error
    result = tool_result(client)
    assert result.is_error
    assert result.content == {"error": "TimeoutError",
                              "message": "rates service timed out (call 3)", "attempts": 3}
    assert len(service.calls) == 3
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert execution.status == "failed" and execution.error == result.content
    assert [a["attempt"] for a in execution.attempt_log] == [1, 2, 3]


def test_retries_on_a_tool_that_is_not_replay_safe_are_refused_when_it_is_defined():
    with pytest.raises(ConfigurationError, match="replay_safe") as caught:
        @tool(retries=3, retry_on=(TimeoutError,))
        def charge(amount: int) -> str:
            """Charge the customer."""
            return "ok"
    assert "repeat" in str(caught.value)

    class Charge(Tool):
        retries = 2

        class Args(BaseModel):
            amount: int

    with pytest.raises(ConfigurationError, match="replay_safe"):
        Charge().check()

    @tool(retries=0)  # no retries: any recovery
    def refund(amount: int) -> str:
        """Refund."""
        return "ok"
    assert refund.retries == 0


@pytest.mark.parametrize(("options", "message"), [
    ({"retries": -1}, "retries must be a non-negative whole number"),
    ({"retries": 1.5}, "retries must be a non-negative whole number"),
    ({"retries": True}, "retries must be a non-negative whole number"),
    ({"retries": 2, "retry_on": (TimeoutError, "ValueError")}, "retry_on must be"),
    ({"retries": 2, "retry_on": (int,)}, "retry_on must be"),
    ({"retries": 2, "retry_on": ()}, "retry_on must be"),
    ({"retries": 2, "backoff": -1}, "backoff must be a non-negative number"),
    ({"retries": 2, "backoff": "2s"}, "backoff must be a non-negative number"),
])
def test_bad_retry_arguments_are_refused_with_what_to_do(options, message):
    with pytest.raises(ConfigurationError, match=message):
        @tool(recovery="replay_safe", **options)
        def fetch(key: str) -> str:
            """Fetch."""
            return key


def test_a_single_exception_class_is_accepted_as_retry_on():
    @tool(recovery="replay_safe", retries=1, retry_on=TimeoutError)
    def fetch(key: str) -> str:
        """Fetch."""
        return key
    assert fetch.retry_on == (TimeoutError,)


def test_the_backoff_grows_exponentially_with_jitter_and_a_cap():
    for attempt, low in ((1, 2.0), (2, 4.0), (3, 8.0)):
        for _ in range(20):
            assert low <= retries.retry_delay(2.0, attempt) <= low * 1.2
    assert retries.retry_delay(2.0, 30) <= retries.MAX_BACKOFF
    assert retries.retry_delay(0.0, 5) == 0.0


# --------------------------------------------------------------------------- worker crashes


def crash_and_reconcile(turn_id: str) -> None:
    with pytest.raises(SimulatedCrash):
        services.run_turn(turn_id, kind="test")
    assert Turn.objects.get(pk=turn_id).status == "running"  # nobody noticed yet
    expire_lease(turn_id)
    assert turnkit_django.reconcile().recovered == [turn_id]


@pytest.mark.usefixtures("background")
def test_a_worker_dying_during_an_attempt_resumes_from_the_recorded_attempt_count(registered):
    service = Flaky(10, die_at=3)  # times out twice, the worker dies in the third attempt
    agent, client = rates_agent(registered, service, retries=2)
    run = agent.prepare("rates please").submit()

    crash_and_reconcile(run.id)
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert [a["attempt"] for a in execution.attempt_log] == [1, 2]
    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    # The third attempt runs again once and is the last: not three more from attempt 1.
    assert len(service.calls) == 4
    execution.refresh_from_db()
    assert [a["attempt"] for a in execution.attempt_log] == [1, 2, 3]
    assert tool_result(client).content["attempts"] == 3


@pytest.mark.usefixtures("background")
def test_a_worker_dying_during_the_backoff_resumes_with_the_next_attempt(registered):
    service = Flaky(1)
    agent, client = rates_agent(registered, service, retries=3)
    run = agent.prepare("rates please").submit()

    failpoints.arm("before_tool_retry")  # attempt 1 failed and is recorded; the wait starts
    crash_and_reconcile(run.id)
    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    assert len(service.calls) == 2 and tool_result(client).content == {"rate": 1.1}
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert [a["attempt"] for a in execution.attempt_log] == [1]


def test_the_attempts_are_on_the_tool_execution_admin_page_for_transcript_readers(registered):
    from tests.unit.test_admin import page, staff

    agent, _ = rates_agent(registered, Flaky(2))
    run = agent.run("rates please")
    execution = ToolExecution.objects.get(turn_id=run.id)
    reader = page(staff("view_toolexecution", "view_transcript"), "toolexecution_change",
                  execution.pk)
    assert "attempt_log" in reader or "attempt log" in reader
    assert "rates service timed out (call 1)" in reader
    assert "rates service timed out (call 2)" in reader
    # The errors may carry what the tool was given: hidden without view_transcript.
    viewer = page(staff("view_toolexecution"), "toolexecution_change", execution.pk)
    assert "rates service timed out" not in viewer


# --------------------------------------------------------------------------- warm shutdown


@pytest.mark.usefixtures("background")
def test_a_stop_request_during_the_backoff_hands_the_turn_back_at_once(registered, monkeypatch):
    """A worker asked to shut down (another thread requests the stop, as Celery's warm shutdown
    does) ends the backoff early and gives the turn back: pending, no recovery counted; the next
    worker waits only what is left of the backoff and goes on with attempt 2."""
    import threading
    import time

    from turnkit_django.base import shutdown

    service = Flaky(1)
    agent, client = rates_agent(registered, service, retries=2, backoff=30.0)
    run = agent.prepare("rates please").submit()
    retrying = threading.Event()

    def stopper() -> None:  # the worker's shutdown signal, from another thread
        if retrying.wait(timeout=60):
            shutdown.request_stop()

    thread = threading.Thread(target=stopper, daemon=True)
    failpoints.arm("before_tool_retry", retrying.set)  # attempt 1 recorded, the backoff starts
    thread.start()
    began = time.monotonic()
    try:
        assert services.run_turn(run.id, kind="test")
    finally:
        retrying.set()
        thread.join(timeout=5)
        shutdown.reset()
    assert time.monotonic() - began < 10, "the backoff (30 s) ran to its end"

    row = Turn.objects.get(pk=run.id)
    assert (row.status, row.claimed_by, row.recovery_attempts) == ("pending", "", 0)
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert (execution.status, execution.attempts) == ("pending", 1)
    assert [a["attempt"] for a in execution.attempt_log] == [1]

    waits: list[float] = []
    monkeypatch.setattr(retries, "pause", lambda seconds, **kw: waits.append(seconds))
    assert services.run_turn(run.id, kind="test")  # another worker
    run.refresh()
    assert (run.status, Turn.objects.get(pk=run.id).recovery_attempts) == ("completed", 0)
    (left,) = waits
    assert 0 < left <= 36, "the rest of the recorded backoff"
    assert len(service.calls) == 2 and tool_result(client).content == {"rate": 1.1}
    execution.refresh_from_db()
    assert (execution.status, execution.attempts) == ("completed", 2)
    assert [a["attempt"] for a in execution.attempt_log] == [1]
