"""Bad input is refused with an error that names it, never ignored (issue 10, item 9)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.dispatch import override_turnkit
from tests.helpers import expire_lease
from tests.testapp.models import Upload
from tests.unstorable import CASES, run_case
from turnkit_django import (
    Agent,
    ConfigurationError,
    InputError,
    NotFound,
    TurnkitError,
    events,
    load_conversation,
    load_run,
    load_turn,
    reconcile,
    tool,
)
from turnkit_django.base.serialization import storable, to_json
from turnkit_django.events import Event
from turnkit_django.messages import ToolCallPart
from turnkit_django.models import Conversation, Delivery, Message, ToolExecution, Turn
from turnkit_django.store import Fenced, claim
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


def quiet() -> Agent:
    return Agent("quiet", client=ScriptedClient([reply("ok")] * 5))


@pytest.mark.parametrize("call", [
    lambda agent: agent.run("go", compactoin=False),
    lambda agent: agent.prepare("go", principle={"user": 1}),
    lambda agent: agent.submit("go", callbak=None),
    lambda agent: agent.conversation(subjet=None),
    lambda agent: agent.conversation().ask("hi", compactoin=False),
    lambda agent: agent.conversation().prepare_turn(modle="x"),
])
def test_an_unknown_option_raises_a_type_error_naming_it_and_writes_nothing(call):
    agent = quiet()
    with pytest.raises(TypeError) as raised:
        call(agent)
    message = str(raised.value)
    assert any(name in message for name in ("compactoin", "principle", "callbak", "subjet",
                                            "modle"))
    assert not Turn.objects.exists()


def test_compaction_can_be_turned_off_for_one_turn():
    """A tiny context limit would compact every request; compaction=False turns it off."""
    client = ScriptedClient([reply("summary"), reply("one"), reply("two")])
    agent = Agent("forgetful", client=client,
                  compaction={"context_limit": 40, "reserved_tokens": 1, "tail_messages": 1})
    conversation = agent.conversation()
    for text in ("first question, long enough to matter", "second question, also long"):
        conversation.say(text)
    turn = conversation.ask("third", compaction=False)
    assert turn.status == "completed" and turn.output_text == "summary"  # no summary call
    assert not Message.objects.filter(kind="context_summary").exists()
    assert conversation.ask("fourth").status == "completed"  # the agent's setting again
    assert Message.objects.filter(kind="context_summary").exists()


@pytest.mark.parametrize("principal", [{"user": 1, 2: "team"}, {"user": object()},
                                       {"tags": {"a", "b"}}, [1, {3: 4}]])
def test_a_principal_that_is_not_json_is_refused_before_any_write(principal):
    with pytest.raises(TypeError) as raised:
        quiet().run("go", principal=principal)
    assert "principal" in str(raised.value)
    assert not Conversation.objects.exists()


def test_a_principal_with_non_string_keys_is_refused_when_sending_a_message():
    agent = quiet()
    source, destination = agent.conversation(), agent.conversation()
    with pytest.raises(TypeError):
        source.send_message(destination, "hello", key="k", principal={1: "x"})


def test_an_abandoned_prepared_turn_becomes_stale_after_the_timeout(registered):
    agent = registered(Agent("preparer", client=ScriptedClient([])))
    run = agent.prepare("never executed")
    with override_turnkit(TIMEOUT=60):
        assert reconcile().stale == []  # younger than TIMEOUT: left alone
        Turn.objects.filter(pk=run.id).update(updated_at=timezone.now() - timedelta(seconds=61))
        report = reconcile()

    assert report.stale == [run.id]
    row = run.refresh().row
    assert row.status == "stale" and row.error["type"] == "Stale"
    assert "prepared" in row.error["message"]


@tool
def probe(ctx) -> str:
    """Probe something."""
    return "x"


@pytest.mark.usefixtures("background")
def test_an_inline_turn_made_stale_emits_the_events_of_its_repair(
        registered, django_capture_on_commit_callbacks):
    agent = registered(Agent("abandoned", client=ScriptedClient([]), tools=[probe]))
    run = agent.prepare("go")
    held = claim(run.id, "a process that dies")
    assert held is not None
    fenced = Fenced(held)
    with fenced.atomic():
        fenced.append("assistant", [ToolCallPart("call_1", "probe", {}),
                                    ToolCallPart("call_2", "probe", {})], kind="tool_call")
        fenced.open_execution(ToolCallPart("call_1", "probe", {}), "running",
                              started_at=timezone.now())  # it started: outcome unknown
    expire_lease(run.id)
    seen: list[Event] = []

    def receive(sender: object, event: Event, **kwargs: object) -> None:
        seen.append(event)

    events.event.connect(receive)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            assert reconcile().stale == [run.id]
    finally:
        events.event.disconnect(receive)

    kinds = [(e.type, e.payload.get("id") or e.payload.get("kind")) for e in seen
             if e.turn_id == run.id]
    assert ("tool_call.interrupted", "call_1") in kinds
    assert kinds.count(("message.created", "tool_result")) == 2
    assert kinds[-1] == ("turn.stale", None)


# -- text and task: a non-empty str, refused before any row (review item 3) ----------------

def _counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Conversation, Turn, Message, Delivery))


BAD_TEXT = [None, 5, {"a": 1}, ["x"], "", "   "]


@pytest.mark.parametrize("bad", BAD_TEXT)
@pytest.mark.parametrize("entry", [
    lambda agent, conv, run, bad: agent.run(bad),
    lambda agent, conv, run, bad: agent.prepare(bad),
    lambda agent, conv, run, bad: agent.submit(bad),
    lambda agent, conv, run, bad: agent.submit(bad, callback=conv),
    lambda agent, conv, run, bad: conv.ask(bad),
    lambda agent, conv, run, bad: conv.ask(bad, submit=True),
    lambda agent, conv, run, bad: conv.ask(bad, key="k"),
    lambda agent, conv, run, bad: conv.say(bad),
    lambda agent, conv, run, bad: conv.say(bad, key="k"),
    lambda agent, conv, run, bad: conv.post(bad, key="k"),
    lambda agent, conv, run, bad: conv.send_message(conv, bad, key="k"),
    lambda agent, conv, run, bad: run.steer(bad, key="k"),
], ids=["run", "prepare", "submit", "submit-callback", "ask", "ask-submit", "ask-key", "say",
        "say-key", "post", "send_message", "steer"])
def test_text_that_is_not_a_non_empty_string_is_refused_before_any_write(registered, entry, bad):
    agent = registered(quiet())
    conv, run = agent.conversation(), agent.prepare("set up")
    before = _counts()
    with pytest.raises(InputError) as raised:
        entry(agent, conv, run, bad)
    assert isinstance(raised.value, ValueError)  # what post() and steer() always raised
    assert "non-empty str" in str(raised.value)
    assert _counts() == before
    assert conv.ask("hello").status == "completed"  # the conversation is still usable


@pytest.mark.parametrize("key", ["k" * 201, "", "   ", 5, "a\x00b"])
@pytest.mark.parametrize("entry", [
    lambda conv, run, key: conv.ask("hello", key=key),
    lambda conv, run, key: conv.say("hello", key=key),
    lambda conv, run, key: conv.post("hello", key=key),
    lambda conv, run, key: conv.input_status(key),
    lambda conv, run, key: run.steer("go on", key=key),
], ids=["ask", "say", "post", "input_status", "steer"])
def test_an_idempotency_key_every_database_cannot_keep_is_refused_before_any_write(
        registered, entry, key):
    """A key too long for its column failed with a raw DataError on PostgreSQL only."""
    agent = registered(quiet())
    conv, run = agent.conversation(), agent.prepare("set up")
    before = _counts()
    with pytest.raises(InputError, match="key"):
        entry(conv, run, key)
    assert _counts() == before
    assert conv.ask("hello", key="k" * 200).status == "completed"  # the longest key kept


def test_a_refused_say_leaves_the_conversation_answerable():
    conv = quiet().conversation()
    for bad in (None, 5):
        with pytest.raises(InputError):
            conv.say(bad)
    assert conv.ask("hello").output_text == "ok"
    assert [m.content[0]["text"] for m in conv.messages()] == ["hello", "ok"]


# -- ids, handles and cursors (review item 8) -------------------------------------------------

def test_send_message_takes_a_handle_a_row_or_a_conversation_id():
    agent = quiet()
    source, destination = agent.conversation(), agent.conversation()
    by_id = source.send_message(destination.id, "by id", key="k1")
    by_row = source.send_message(destination.row, "by row", key="k2")
    assert by_id.destination_conversation_id == by_row.destination_conversation_id \
        == destination.id


@pytest.mark.parametrize("target", ["conv_nope", None, 5, object()])
def test_send_message_to_no_conversation_is_refused_before_any_write(target):
    source = quiet().conversation()
    before = _counts()
    with pytest.raises(TurnkitError) as raised:
        source.send_message(target, "hi", key="k")
    assert "send_message" in str(raised.value)
    if isinstance(target, str):
        assert isinstance(raised.value, NotFound)
        assert isinstance(raised.value, Conversation.DoesNotExist)
    else:
        assert isinstance(raised.value, InputError)
    assert _counts() == before


@pytest.mark.usefixtures("background")
def test_submit_takes_a_callback_conversation_by_id(registered):
    agent = registered(quiet())
    parent = agent.conversation()
    run = agent.prepare("later").submit(callback=parent.id)
    assert run.row.submitted_at is not None
    assert run.row.options["callback_conversation"] == parent.id


@pytest.mark.parametrize("callback", ["nope", 5, {"id": 1}])
def test_a_callback_that_is_no_conversation_is_refused_and_the_run_stays_prepared(
        registered, callback):
    agent = registered(quiet())
    run = agent.prepare("later")
    with pytest.raises(TurnkitError) as raised:
        run.submit(callback=callback)
    assert "callback" in str(raised.value)
    assert isinstance(raised.value, NotFound if isinstance(callback, str) else InputError)
    row = run.refresh().row
    assert row.status == "pending" and row.submitted_at is None
    with pytest.raises(TurnkitError):
        agent.submit("later", callback=callback)
    assert Turn.objects.count() == 1


@pytest.mark.parametrize("entry", [
    lambda agent: agent.conversation(subject="order42"),
    lambda agent: agent.run("go", subject="order42"),
    lambda agent: agent.prepare("go", subject=Upload()),  # unsaved: it has no id to point to
])
def test_a_subject_that_is_not_a_saved_model_instance_is_refused(entry):
    with pytest.raises(InputError) as raised:
        entry(quiet())
    assert "subject" in str(raised.value)
    assert _counts() == (0, 0, 0, 0)


@pytest.mark.parametrize("after", ["x", None, -1, 1.5, True, [1]])
def test_a_cursor_that_is_not_a_non_negative_integer_is_refused(after):
    agent = quiet()
    conv, run = agent.conversation(), agent.run("go")
    for read in (conv.messages, run.events):
        with pytest.raises(InputError) as raised:
            read(after=after)
        assert "after=" in str(raised.value)
    assert list(conv.messages(after=0)) == []
    assert run.events(after=0).exists() and list(run.events(after="3")) == list(run.events(3))


@pytest.mark.parametrize("after", ["9" * 5000, 10 ** 5000, 2 ** 63, str(2 ** 63), -(10 ** 5000)],
                         ids=["digits", "int", "bigint", "bigint-str", "negative"])
def test_a_cursor_past_any_id_a_database_stores_is_refused(after):
    """Past a bigint (and past the 4,300 digits Python converts) is InputError, not ValueError
    or OverflowError from the conversion or the query."""
    agent = quiet()
    conv, run = agent.conversation(), agent.run("go")
    for read in (conv.messages, run.events):
        with pytest.raises(InputError) as raised:
            list(read(after=after))
        assert "after=" in str(raised.value) and len(str(raised.value)) < 300
    largest = 2 ** 63 - 1
    assert list(conv.messages(after=largest)) == list(run.events(after=str(largest))) == []


@pytest.mark.parametrize(("load", "model"), [
    (load_run, Turn), (load_turn, Turn), (load_conversation, Conversation)])
@pytest.mark.parametrize("ident", ["nope", None, 5])
def test_loading_an_unknown_id_raises_not_found_which_is_the_models_does_not_exist(
        load, model, ident):
    with pytest.raises(NotFound) as raised:
        load(ident)
    assert isinstance(raised.value, model.DoesNotExist)  # what callers caught before
    assert isinstance(raised.value, TurnkitError)
    assert repr(ident) in str(raised.value)


def test_loading_a_conversation_by_a_turn_id_says_which_loader_takes_it():
    run = quiet().prepare("x")
    with pytest.raises(NotFound) as raised:
        load_conversation(run.id)
    assert "load_run" in str(raised.value)
    with pytest.raises(NotFound) as raised:
        load_run(run.row.conversation_id)
    assert "load_conversation" in str(raised.value)
    assert load_run(run.id).id == load_conversation(run.row.conversation_id).turns()[0].pk


@pytest.mark.parametrize("name", CASES)
def test_model_and_tool_output_no_database_stores_is_stored_cleaned(name):
    """NUL, lone surrogates and NaN: stored as U+FFFD and text, as on PostgreSQL
    (tests/integration/test_unstorable_values.py), and the run completes."""
    run_case(CASES[name])


def test_storable_replaces_only_what_no_database_stores():
    value = {"a\x00": ["x\ud800y", "\ud83d\ude00", float("nan"), 1.5, True, None]}
    assert storable(value) == {"a\ufffd": ["x\ufffdy", "\U0001f600", "nan", 1.5, True, None]}
    clean = {"a": ["b", 1.0, {"c": "\U0001f600"}]}
    assert storable(clean) is clean
    assert to_json({"r": float("-inf")}) == {"r": "-inf"}


@pytest.mark.parametrize("text", ["a\x00b", "a\ud800b"])
def test_application_text_no_database_stores_is_refused_before_any_write(text):
    agent = quiet()
    conversation = agent.conversation()
    for attempt in (lambda: agent.run(text), lambda: agent.prepare(text),
                    lambda: agent.submit(text), lambda: conversation.say(text),
                    lambda: conversation.ask(text), lambda: conversation.ask(text, submit=True),
                    lambda: conversation.post(text, key="k")):
        with pytest.raises(InputError) as raised:
            attempt()
        assert " contains a " in str(raised.value) and "remove" in str(raised.value)
    assert not Turn.objects.exists() and not Message.objects.exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "a\x00b", {"k\x00": 1}])
def test_context_and_metadata_no_database_stores_are_refused(value):
    agent = quiet()
    with pytest.raises(ConfigurationError, match="context contains"):
        agent.prepare("x", context={"s": value})
    with pytest.raises(ConfigurationError, match="metadata contains"):
        agent.conversation(metadata={"s": value})
    conversation = Conversation.objects.count()
    with pytest.raises(ConfigurationError, match="metadata contains"):
        agent.conversation().say("hi", metadata={"s": value})
    assert not Message.objects.exists() and Conversation.objects.count() == conversation + 1


@tool(approval=True)
def gated(order_id: str) -> str:
    """Do something a person approves first."""
    return f"done {order_id}"


@pytest.mark.parametrize("reason", [5, ["no"], "no\x00"])
def test_a_denial_whose_reason_is_not_storable_text_is_refused_and_the_call_stays_parked(
        registered, reason):
    client = ScriptedClient([call("gated", order_id="42"), reply("after")])
    run = registered(Agent("gate-keeper", client=client, tools=[gated])).run("go")
    call_id = run.pending_approvals()[0].tool_call_id
    with pytest.raises(InputError, match="the reason of a decision"):
        run.deny(call_id, reason=reason)
    execution = ToolExecution.objects.get(tool_call_id=call_id)
    assert execution.approval["state"] == "requested" and run.refresh().status == "paused"
    run.deny(call_id, reason="over the limit")  # a usable reason still decides it
    assert ToolExecution.objects.get(pk=execution.pk).approval["reason"] == "over the limit"


@pytest.mark.parametrize(("options", "named"), [({"focus": 5}, "focus"),
                                                ({"focus": "a\x00b"}, "focus"),
                                                ({"keep_last": "2"}, "keep_last"),
                                                ({"keep_last": -1}, "keep_last")])
def test_a_manual_compaction_with_bad_options_is_refused_before_the_summariser_is_called(
        options, named):
    client = ScriptedClient([reply("a0"), reply("a1"), reply("a2")])
    conversation = Agent("compacting", client=client).conversation()
    for n in range(3):
        conversation.ask(f"Question {n}")
    before = conversation.messages().count()
    with pytest.raises(InputError, match=named):
        conversation.compact(**options)
    assert conversation.messages().count() == before and len(client.requests) == 3
