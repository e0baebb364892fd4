"""Events: Django signals and per-run callbacks, sent only after the facts commit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.db import transaction
from django.dispatch import Signal

from turnkit_django import Agent, events, services, tool
from turnkit_django.events import Event, event, turn_completed
from turnkit_django.models import Event as EventRow
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = pytest.mark.django_db


@tool
def probe(n: int) -> int:
    """Return n."""
    return n


def agent() -> Agent:
    return Agent("events_probe", tools=[probe],
                 client=ScriptedClient([call("probe", n=1), reply("done")]))


@pytest.fixture
def received():
    seen: list[Event] = []

    def receiver(sender, event: Event, **kwargs):
        seen.append(event)

    event.connect(receiver)
    yield seen
    event.disconnect(receiver)


def test_a_run_announces_its_lifecycle_in_order(received, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run = agent().run("go")
    types = [e.type for e in received]
    assert types[0] == "turn.started" and types[-1] == "turn.completed"
    order = ["model.requested", "model.completed", "tool_call.started",
             "tool_call.completed", "model.requested", "model.completed"]
    assert [t for t in types if t in set(order)] == order
    assert types.count("message.created") == 3  # response, tool result, answer
    assert {e.turn_id for e in received} == {run.id}
    assert received[-1].payload["output_text"] == "done"


def test_nothing_is_announced_for_work_that_rolled_back(received,
                                                        django_capture_on_commit_callbacks):
    class Abort(Exception):
        pass

    sender, other = agent().conversation(), agent().conversation()
    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        with pytest.raises(Abort), transaction.atomic():
            sender.send_message(other, "hello", key="rolled-back")  # delivered, woken: events
            raise Abort
    assert received == [] and callbacks == []


def test_named_signals_and_the_per_run_callback_receive_events(django_capture_on_commit_callbacks):
    completed: list[str] = []
    per_run: list[str] = []

    def on_completed(sender, event: Event, **kwargs):
        completed.append(event.turn_id or "")

    turn_completed.connect(on_completed)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run = agent().prepare("go").execute(on_event=lambda e: per_run.append(e.type))
    finally:
        turn_completed.disconnect(on_completed)
    assert completed == [run.id]
    assert per_run[-1] == "turn.completed" and "tool_call.completed" in per_run


def test_a_failing_receiver_does_not_break_the_turn(django_capture_on_commit_callbacks):
    def broken(sender, event: Event, **kwargs):
        raise RuntimeError("receiver bug")

    event.connect(broken)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run = agent().prepare("go").execute(on_event=lambda e: 1 / 0)
    finally:
        event.disconnect(broken)
    assert run.status == "completed" and run.output_text == "done"


def test_the_events_reference_lists_every_signal_module_attribute():
    """docs/reference/events.md names the module attributes one by one; none is left out."""
    page = (Path(__file__).resolve().parents[2] / "docs/reference/events.md").read_text()
    paragraph = page.split("Module attributes exist for ", 1)[1].split("; every type", 1)[0]
    listed = set(re.findall(r"`([a-z_]+)`", paragraph))
    attributes = {name for name, value in vars(events).items()
                  if isinstance(value, Signal) and value is not events.event}
    assert listed == attributes
    assert all(getattr(events, name) in events.signals.values() for name in attributes)


@pytest.mark.usefixtures("background")
def test_a_cascaded_pause_resume_and_steer_signal_each_turn_with_its_own_conversation(
        registered, django_capture_on_commit_callbacks):
    """The signals of a cascade carried the target's conversation_id for every turn, though
    each sub-agent turn has a conversation of its own (the docs: "those of the turn the event
    is about")."""
    def kid_answer(request):
        return reply("done")

    kids = [Agent(name, description=name, client=FunctionClient(kid_answer))
            for name in ("alpha", "beta")]

    def boss_respond(request):
        if request.messages[-1].role == "tool":
            return reply("joined")
        return [call(name, id=f"call_{name}", task=f"task {name}") for name in ("alpha", "beta")]

    boss = registered(Agent("boss", sub_agents=kids, client=FunctionClient(boss_respond)))
    run = boss.submit("go")
    assert services.run_turn(run.id)  # fans out: the root waits, the children are pending
    seen: list[Event] = []

    def receive(sender, event, **kwargs):
        if event.type.startswith("turn.") and event.type != "turn.started":
            seen.append(event)

    events.event.connect(receive)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run.pause(cascade=True)
            run.resume(cascade=True)
            run.steer("be brief", key="k1", descendants=True)  # every turn it steers, too
    finally:
        events.event.disconnect(receive)
    conversations = dict(Turn.objects.filter(root_turn_id=run.id)
                         .values_list("pk", "conversation_id"))
    assert len(conversations) == 3 and len(seen) == 9
    assert {e.turn_id for e in seen if e.type == "turn.steer_requested"} == set(conversations)
    # The idle turns paused at once: the signal is the recorded event, turn.paused.
    assert [e.type for e in seen[:3]] == ["turn.paused"] * 3
    assert [e.type for e in seen[:3]] == list(EventRow.objects.filter(
        root_turn_id=run.id, type__startswith="turn.pause").values_list("type", flat=True))
    assert [(e.turn_id, e.conversation_id) for e in seen] == [
        (e.turn_id, conversations[e.turn_id]) for e in seen]
