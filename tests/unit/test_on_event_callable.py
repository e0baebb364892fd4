"""``on_event=`` must be callable: a non-callable one was accepted, and every event then went
to a callback that failed each time, logged and unheard."""

from __future__ import annotations

import pytest

from turnkit_django import Agent, ConfigurationError, InputError
from turnkit_django.models import Conversation, Message, Turn
from turnkit_django.testing import ScriptedClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


def _counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Conversation, Turn, Message))


@pytest.mark.parametrize("bad", [5, "myapp.events.log", ["x"]])
@pytest.mark.parametrize("entry", [
    lambda agent, conv, pending, bad: agent.run("go", on_event=bad),
    lambda agent, conv, pending, bad: agent.prepare("go", on_event=bad),
    lambda agent, conv, pending, bad: agent.submit("go", on_event=bad),
    lambda agent, conv, pending, bad: conv.ask("hi", on_event=bad),
    lambda agent, conv, pending, bad: pending.execute(on_event=bad),
], ids=["run", "prepare", "submit", "ask", "execute"])
def test_an_on_event_that_is_not_callable_is_refused_before_any_write(entry, bad):
    agent = Agent("quiet", client=ScriptedClient([reply("ok")] * 3))
    conv, pending = agent.conversation(), agent.prepare("set up")
    before = _counts()
    with pytest.raises(InputError, match="on_event= must be a callable") as raised:
        entry(agent, conv, pending, bad)
    assert type(bad).__name__ in str(raised.value)
    assert _counts() == before
    assert pending.refresh().status == "pending"  # execute refused before claiming
    assert pending.execute(on_event=lambda event: None).status == "completed"


def test_an_agent_with_an_on_event_that_is_not_callable_is_a_configuration_error():
    with pytest.raises(ConfigurationError, match="agent 'quiet': on_event must be a callable"):
        Agent("quiet", on_event=5)
    assert Agent("quiet", on_event=print).on_event is print


@pytest.mark.parametrize("entry", [
    lambda agent, conv: agent.submit("go", on_event=print),
    lambda agent, conv: agent.submit("go", on_event=print, callback=conv),
    lambda agent, conv: conv.ask("hi", submit=True, on_event=print),
], ids=["submit", "submit-callback", "ask-submit"])
def test_a_callback_for_a_turn_handed_to_a_worker_is_refused_before_any_write(entry):
    """A submitted turn runs on a worker, which never calls a callback of this process: the
    callback was accepted and silently never heard."""
    agent = Agent("quiet", client=ScriptedClient([reply("ok")]))
    conv = agent.conversation()
    before = _counts()
    with pytest.raises(InputError, match="on_event= is called only by a turn executed in this"):
        entry(agent, conv)
    assert _counts() == before


@pytest.mark.parametrize("entry", [
    lambda run, conv: run.submit(),
    lambda run, conv: run.submit(callback=conv),
    lambda run, conv: run.turn.submit(),
], ids=["submit", "submit-callback", "turn-submit"])
def test_a_prepared_run_with_a_callback_is_not_submitted(entry,
                                                         django_capture_on_commit_callbacks):
    """``agent.prepare(task, on_event=cb).submit()`` handed the run to a worker and dropped the
    callback silently: like ``agent.submit(on_event=)`` it is refused, and the run stays
    pending, to execute inline (where the callback is heard) or submit from a run prepared
    without one."""
    agent = Agent("quiet", client=ScriptedClient([reply("ok")]))
    conv = agent.conversation()
    heard: list[str] = []
    run = agent.prepare("go", on_event=lambda event: heard.append(event.type))
    with pytest.raises(InputError, match="prepared with on_event="):
        entry(run, conv)
    assert run.refresh().status == "pending" and run.row.submitted_at is None
    with django_capture_on_commit_callbacks(execute=True):
        assert run.execute().status == "completed"
    assert heard[-1] == "turn.completed"  # the callback hears the run executed inline
