"""The in-memory dispatcher users get from turnkit_django.testing, used as the testing page says."""

from __future__ import annotations

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
