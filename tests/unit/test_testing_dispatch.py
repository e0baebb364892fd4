"""The in-memory dispatcher users get from turnkit_django.testing, used as the testing page says."""

from __future__ import annotations

import pathlib
import re

import pytest

from turnkit_django import Agent
from turnkit_django.testing import (
    InMemoryDispatcher,
    ScriptedClient,
    in_memory_dispatcher,
    reply,
)

# The fixture `turnkit_dispatcher` comes from tests/unit/conftest.py, which imports it from
# turnkit_django.testing the way a user's conftest.py does.

pytestmark = pytest.mark.django_db


@pytest.fixture
def model(settings):
    client = ScriptedClient()
    settings.TURNKIT = {**settings.TURNKIT, "CLIENT": client}
    return client


def test_submitted_turns_wait_in_memory_until_run_here(turnkit_dispatcher, model, registered,
                                                       django_capture_on_commit_callbacks):
    model.add(reply("done"))
    agent = registered(Agent("dispatch_probe"))
    with django_capture_on_commit_callbacks(execute=True):
        run = agent.submit("a task")
    assert run.refresh().status == "pending"
    assert turnkit_dispatcher.dispatched() == [run.id]
    assert turnkit_dispatcher.run_dispatched()[0] == run.id
    assert turnkit_dispatcher.dispatched() == []
    assert run.refresh().status == "completed" and run.output_text == "done"


def test_the_next_turn_of_a_conversation_is_run_too(turnkit_dispatcher, model, registered,
                                                    django_capture_on_commit_callbacks):
    model.add(reply("1"), reply("2"))
    conversation = registered(Agent("lane_probe")).conversation()
    with django_capture_on_commit_callbacks(execute=True):  # the doorbells ring on "commit"
        first = conversation.ask("one", submit=True)
        second = conversation.ask("two", submit=True)
    rung = turnkit_dispatcher.run_dispatched()
    assert rung[:2] == [first.id, second.id]
    assert (first.refresh().output_text, second.refresh().output_text) == ("1", "2")


def test_the_fixture_installs_the_shared_instance_and_clears_it(turnkit_dispatcher, settings):
    assert turnkit_dispatcher is in_memory_dispatcher
    assert settings.TURNKIT["DISPATCHER"] is in_memory_dispatcher
    in_memory_dispatcher("turn_x")
    assert turnkit_dispatcher.dispatched() == ["turn_x"]


def test_a_turn_that_keeps_ringing_is_stopped_with_an_error():
    recorder = InMemoryDispatcher()
    for _ in range(3):
        recorder("turn_missing")
    with pytest.raises(RuntimeError, match="more than 2 doorbells"):
        recorder.run_dispatched(limit=2)


def _unreachable_broker(turn_id: str) -> None:
    raise ConnectionRefusedError(111, "Connection refused")


def test_a_failed_doorbell_is_logged_on_the_logger_the_docs_name(model, registered, settings,
                                                                 caplog,
                                                                 django_capture_on_commit_callbacks):
    """deployment.md and celery.md tell operators which logger to watch for `could not
    dispatch turn ...`; the warning must come from that logger, and submit() must not fail."""
    docs = pathlib.Path(__file__).resolve().parents[2] / "docs" / "howto"
    named = {m.group(1) for page in ("deployment.md", "celery.md")
             for m in re.finditer(r"could not dispatch turn[^`]*`[^(]*\(logger\s+`([\w.]+)`\)",
                                  (docs / page).read_text(encoding="utf-8"))}
    assert len(named) == 1, named
    settings.TURNKIT = {**settings.TURNKIT, "DISPATCHER": _unreachable_broker}
    agent = registered(Agent("dispatch_down"))
    with caplog.at_level("WARNING"), django_capture_on_commit_callbacks(execute=True):
        run = agent.submit("a task")
    assert run.refresh().status == "pending"
    (record,) = [r for r in caplog.records if "could not dispatch turn" in r.getMessage()]
    assert record.name == named.pop()
