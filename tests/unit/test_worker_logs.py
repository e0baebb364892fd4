"""A worker logs one line per turn outcome, with the turn's facts as ``extra=`` fields; a
condition the system heals by itself (the broker down at submit) is one line, no traceback
(issue 40: the worker said only ``Task turnkit.run_turn[<uuid>] succeeded in 0.02s: None``)."""

from __future__ import annotations

import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from celery import Celery, current_app

from tests.helpers import crash
from turnkit_django import Agent, load_run, reconcile, services, tool
from turnkit_django.base import shutdown
from turnkit_django.exceptions import ModelError
from turnkit_django.services import turns
from turnkit_django.tasks import run_turn as run_turn_task
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

WORKER = "turnkit_django.worker"
# Kept alive: a collected app's id could be reused by a later test's app (test_checks_celery).
_APPS: list[Celery] = []


@pytest.fixture(autouse=True)
def _reset() -> Iterator[None]:
    yield
    shutdown.reset()


@tool
def lookup(ctx) -> str:
    """A step."""
    return "found"


@tool
def cancel_me(ctx) -> str:
    """Cancelled by the application while it runs."""
    load_run(ctx.turn.id).cancel()
    return "too late"


@tool
def pause_me(ctx) -> str:
    """Paused by the application while it runs."""
    load_run(ctx.turn.id).pause()
    return "paused"


@tool
def stop_worker(ctx) -> str:
    """The worker is told to stop while this runs."""
    shutdown.request_stop()
    return "stopping"


def _outcome(caplog: pytest.LogCaptureFixture, turn_id: str) -> logging.LogRecord:
    (record,) = [r for r in caplog.records if r.name == WORKER
                 and getattr(r, "turnkit_turn_id", None) == turn_id]
    return record


def _run(caplog: pytest.LogCaptureFixture, registered: Any, agent: Agent) -> tuple[
        str, logging.LogRecord]:
    run = registered(agent).submit("go")
    with caplog.at_level(logging.DEBUG, logger=WORKER):
        services.run_turn(run.id, kind="test")
    return run.id, _outcome(caplog, run.id)


def test_a_completed_turn_is_one_info_line_with_its_facts(caplog, registered):
    client = ScriptedClient([call("lookup", id="c1"), reply("done")])
    turn_id, record = _run(caplog, registered, Agent("support", tools=[lookup], client=client))

    assert record.levelno == logging.INFO and record.exc_info is None
    assert re.fullmatch(rf"turn {turn_id} \(support\) completed in \d+\.\d\ds after 3 steps",
                        record.getMessage()), record.getMessage()
    row = load_run(turn_id)
    assert record.turnkit_agent == "support"
    assert record.turnkit_conversation_id == row.conversation_id
    assert record.turnkit_outcome == "completed"
    assert record.turnkit_steps == 3  # model, tools, model
    assert isinstance(record.turnkit_duration, float) and record.turnkit_duration >= 0
    assert record.turnkit_taken_by is None


def test_a_failed_turn_says_failed(caplog, registered):
    client = ScriptedClient([ModelError("the provider refused", retryable=False)])
    turn_id, record = _run(caplog, registered, Agent("failing", client=client))
    assert load_run(turn_id).status == "failed"
    assert (record.levelno, record.turnkit_outcome, record.turnkit_steps) == (
        logging.INFO, "failed", 1)
    assert f"turn {turn_id} (failing) failed in " in record.getMessage()


def test_a_turn_paused_at_a_step_boundary_says_paused(caplog, registered):
    client = ScriptedClient([call("pause_me", id="c1"), reply("done")])
    turn_id, record = _run(caplog, registered, Agent("pausable", tools=[pause_me],
                                                    client=client))
    assert load_run(turn_id).status == "paused"
    assert (record.turnkit_outcome, record.turnkit_steps) == ("paused", 2)
    assert " paused in " in record.getMessage()


def test_a_worker_fenced_out_by_a_cancel_during_a_tool_says_who_took_the_turn(
        caplog, registered):
    client = ScriptedClient([call("cancel_me", id="c1"), reply("done")])
    turn_id, record = _run(caplog, registered, Agent("cancellable", tools=[cancel_me],
                                                    client=client))
    assert load_run(turn_id).status == "cancelled"
    assert record.levelno == logging.INFO
    assert (record.turnkit_outcome, record.turnkit_taken_by, record.turnkit_steps) == (
        "fenced_out", "cancel", 2)
    assert re.fullmatch(rf"turn {turn_id} \(cancellable\) fenced out in \d+\.\d\ds after 2 "
                        r"steps: the turn was cancelled while it ran", record.getMessage()
                        ), record.getMessage()


def test_a_turn_handed_back_at_shutdown_says_handed_back(caplog, registered):
    client = ScriptedClient([call("stop_worker", id="c1"), reply("done")])
    turn_id, record = _run(caplog, registered, Agent("stoppable_logs", tools=[stop_worker],
                                                    client=client))
    assert load_run(turn_id).status == "pending"
    assert (record.turnkit_outcome, record.turnkit_steps) == ("handed_back", 2)
    assert " handed back in " in record.getMessage()


def test_a_duplicate_delivery_is_a_debug_line(caplog, registered):
    turn_id, _ = _run(caplog, registered, Agent("once", client=ScriptedClient([reply("x")])))
    caplog.clear()
    with caplog.at_level(logging.DEBUG, logger=WORKER):
        assert services.run_turn(turn_id, kind="test") is False
    record = _outcome(caplog, turn_id)
    assert (record.levelno, record.turnkit_outcome) == (logging.DEBUG, "not_claimable")


def test_the_task_returns_a_summary_for_celery_s_succeeded_line(registered):
    run = registered(Agent("summarized", client=ScriptedClient([reply("x")]))).submit("go")
    summary = run_turn_task.apply(args=(run.id,)).get()
    assert summary == {"turn_id": run.id, "agent": "summarized", "outcome": "completed",
                       "steps": 1, "duration": summary["duration"]}
    assert run_turn_task.ignore_result  # nothing is stored in a result backend
    assert turns.run_turn(run.id) is False  # the service still answers "did it run"


def test_reconcile_logs_each_recovered_and_dead_lettered_turn(
        caplog, registered, settings, django_capture_on_commit_callbacks):
    settings.TURNKIT = {**settings.TURNKIT, "MAX_RECOVERY_ATTEMPTS": 1}
    run = registered(Agent("crashy", client=ScriptedClient([reply("x")] * 3))).submit("go")
    for expected in ("recovered", "dead_lettered"):
        crash(run.id, "before_model_call")
        caplog.clear()
        with caplog.at_level(logging.WARNING, logger=WORKER), \
                django_capture_on_commit_callbacks(execute=True):
            reconcile()
        record = _outcome(caplog, run.id)
        assert (record.levelno, record.turnkit_outcome, record.turnkit_agent) == (
            logging.WARNING, expected, "crashy")
        assert record.exc_info is None
        assert f"turn {run.id} (crashy) " in record.getMessage()
        assert "lease expired" in record.getMessage() or "lost its worker" in (
            record.getMessage())


def test_broker_down_at_submit_is_one_warning_line_without_traceback(
        caplog, registered, settings, django_capture_on_commit_callbacks):
    settings.TURNKIT = {k: v for k, v in settings.TURNKIT.items() if k != "DISPATCHER"}
    settings.TURNKIT["CLIENT"] = ScriptedClient()
    previous = current_app._get_current_object()
    app = Celery("broker_down", set_as_current=True)  # a broker nobody listens on
    _APPS.append(app)
    app.conf.update(broker_url="redis://127.0.0.1:1/0", broker_connection_retry=False,
                    broker_connection_max_retries=0,
                    task_publish_retry_policy={"max_retries": 0})
    try:
        agent = registered(Agent("no_broker"))
        with caplog.at_level(logging.DEBUG), django_capture_on_commit_callbacks(execute=True):
            run = agent.submit("a task")
    finally:
        previous.set_current()
    assert run.refresh().status == "pending"
    warnings = [r for r in caplog.records if r.levelno >= logging.WARNING]
    (record,) = warnings
    assert record.exc_info is None and record.turnkit_turn_id == run.id
    text = record.getMessage()
    assert run.id in text and "maintenance will re-dispatch it" in text, text
    assert "\n" not in text
