"""Dynamic context snapshots (issue 16; TurnKit 0.7.1): a byte-stable instruction prefix.

A client with ``dynamic_context_in_history`` gets only the stable prompt as instructions and the
dynamic part (subject, live context, environment) as append-only ``dynamic_context`` messages,
written before the model call and only when they changed. Other clients keep the two apart in
the request (Anthropic marks the stable block for its cache). A preview writes nothing.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import pytest
from django.utils import timezone

from tests.helpers import crash_and_resume
from turnkit_django import Agent, Prompt, load_conversation, tool
from turnkit_django.clients import AnthropicClient, ModelRequest
from turnkit_django.messages import DYNAMIC_CONTEXT
from turnkit_django.models import Message, Turn
from turnkit_django.runtime.dynamic_context import EMPTY, HEADER
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


class CachingClient(FunctionClient):
    dynamic_context_in_history = True


class CachingScript(ScriptedClient):
    dynamic_context_in_history = True


plan = {"value": "gold"}


@pytest.fixture(autouse=True)
def _plan() -> None:
    plan["value"] = "gold"


def current_plan(turn: Any) -> Any:
    return plan["value"] and {"name": "plan", "content": plan["value"]}


@tool
def upgrade(to: str) -> str:
    """Change the customer's plan."""
    plan["value"] = to
    return f"now {to}"


def snapshots(conversation_id: str) -> list[str]:
    rows = Message.objects.filter(conversation_id=conversation_id, kind=DYNAMIC_CONTEXT)
    return [m.content[0]["text"] for m in rows.order_by("sequence")]


def support(client: Any) -> Agent:
    return Agent("support", instructions="Help.", tools=[upgrade],
                 context_contributors=[current_plan], client=client)


def test_snapshots_are_appended_before_the_call_only_when_the_context_changed():
    def respond(request: ModelRequest) -> Any:
        steps = sum(1 for m in request.messages if m.role == "assistant")
        return [call("upgrade", to="gold"), call("upgrade", to="platinum"), reply("done")][steps]

    client = CachingClient(respond)
    run = support(client).run("Upgrade me")

    assert run.status == "completed", run.error
    first, second, third = client.requests
    # The instructions are the stable prompt: byte-identical on every request.
    assert first.stable_instructions == second.stable_instructions == third.stable_instructions
    assert [r.dynamic_instructions for r in client.requests] == ["", "", ""]
    assert "gold" not in first.stable_instructions
    # One snapshot before the first call; none before the second (unchanged); a new one after
    # the plan changed. The history only grows: each request extends the previous one.
    texts = snapshots(run.conversation_id)
    assert len(texts) == 2 and "gold" in texts[0] and "platinum" in texts[1]
    assert texts[0].startswith(HEADER)
    assert [m.kind for m in first.messages] == ["text", DYNAMIC_CONTEXT]
    assert second.messages[:len(first.messages)] == first.messages
    assert third.messages[:len(second.messages)] == second.messages
    assert third.messages[-1].kind == DYNAMIC_CONTEXT


def ask_at(conv: Any, text: str, when: datetime) -> None:
    """Ask in a turn created at ``when`` (its environment section names that time)."""
    conv.say(text)
    turn = conv.prepare_turn()
    Turn.objects.filter(pk=turn.id).update(created_at=when)
    assert turn.execute().status == "completed"


def test_a_later_turn_dedupes_against_the_last_snapshot_it_sees():
    conv = support(CachingScript([reply("ok")] * 4)).conversation()
    when = timezone.now()
    ask_at(conv, "first", when)
    ask_at(conv, "second", when)  # same context: the first turn's snapshot stands
    plan["value"] = "silver"
    ask_at(conv, "third", when)
    ask_at(conv, "fourth", when)

    texts = snapshots(conv.id)
    assert len(texts) == 2 and "gold" in texts[0] and "silver" in texts[1]


def test_a_context_that_became_empty_is_cleared_once():
    def prompt(composed: Prompt) -> Prompt:
        return composed if plan["value"] else composed.without("subject", "live_context",
                                                              "environment")

    agent = Agent("plain", instructions="Help.", context_contributors=[current_plan],
                  system_prompt=prompt, client=CachingScript([reply("ok")] * 3))
    conv = agent.conversation()
    conv.ask("first")
    plan["value"] = ""
    conv.ask("second")
    conv.ask("third")

    texts = snapshots(conv.id)
    assert len(texts) == 2 and "gold" in texts[0] and texts[1] == EMPTY


def test_a_preview_shows_the_snapshot_and_writes_nothing():
    run = support(CachingScript([reply("ok")])).prepare("Upgrade me")
    before = Message.objects.count()

    request = run.preview()

    assert Message.objects.count() == before and snapshots(run.conversation_id) == []
    assert request.dynamic_instructions == ""
    assert request.messages[-1].kind == DYNAMIC_CONTEXT and "gold" in request.messages[-1].text
    run.execute()
    (sent,) = run.agent.client.requests
    # What the provider gets (roles, kinds, parts) is what the preview showed.
    assert [(m.role, m.kind, m.parts) for m in sent.messages] == [
        (m.role, m.kind, m.parts) for m in request.messages]
    assert sent.stable_instructions == request.stable_instructions


def test_other_clients_keep_stable_and_dynamic_instructions_apart():
    client = ScriptedClient([reply("ok")])
    run = support(client).run("hi")

    (request,) = client.requests
    assert "gold" in request.dynamic_instructions and "gold" not in request.stable_instructions
    assert all(m.kind != DYNAMIC_CONTEXT for m in request.messages)
    assert snapshots(run.conversation_id) == []
    # Anthropic: the stable block is cache-marked, the dynamic block follows uncached.
    system = AnthropicClient(api_key="x").build_request(request)["system"]
    assert system == [
        {"type": "text", "text": request.stable_instructions, "cache_control": {
            "type": "ephemeral"}},
        {"type": "text", "text": request.dynamic_instructions}]


def test_cursor_reads_leave_snapshots_out():
    conv = support(CachingScript([reply("ok")])).conversation()
    conv.ask("hi")

    assert [m.kind for m in conv.messages()] == ["text", "text"]
    assert DYNAMIC_CONTEXT in [m.kind for m in conv.messages(include_private=True)]


@tool
def fetch_page(page: int) -> str:
    """Fetch a page of the report."""
    return f"page {page}: " + "lorem ipsum " * 100


def test_a_snapshot_compaction_summarised_away_is_sent_again():
    steps = iter([*(call("fetch_page", page=n) for n in range(1, 7)), reply("Report read.")])

    def respond(request: ModelRequest) -> Any:
        if request.metadata.get("purpose") == "compaction":
            return reply("the summary")
        return next(steps)

    client = CachingClient(respond)
    small = {"context_limit": 2000, "reserved_tokens": 0, "threshold": 0.5, "tail_messages": 2}
    run = Agent("reader", tools=[fetch_page], compaction=small, client=client).run("Read it")

    assert run.status == "completed", run.error
    texts = snapshots(run.conversation_id)
    assert len(texts) >= 2 and len(set(texts)) == 1  # the same snapshot, sent again
    for request in client.requests:
        if request.metadata.get("purpose") is None:  # every agent request shows one
            assert [m.kind for m in request.messages].count(DYNAMIC_CONTEXT) >= 1
            assert request.dynamic_instructions == ""


@pytest.mark.usefixtures("background")
def test_a_resumed_turn_keeps_its_snapshot_and_sends_the_same_prefix(registered):
    client = CachingScript([reply("answered")])
    agent = registered(support(client))
    run = agent.submit("Upgrade me")

    crash_and_resume(run.id, "before_model_call")  # the snapshot committed, then the worker died

    run.refresh()
    assert run.status == "completed", run.error
    assert len(snapshots(run.conversation_id)) == 1  # not written again on resume
    (request,) = client.requests  # the crash came before the first call reached the model
    assert [m.kind for m in request.messages] == ["text", DYNAMIC_CONTEXT]


def test_a_snapshot_writes_no_event_the_model_still_gets_it():
    """Issue 35 H3: the snapshot got a ``message.created`` event carrying its text, so
    ``run.events()``, the SSE view and the run page showed private context to the end user as
    a user message. Private context has no event; the cursor read hides it; the model sees it."""
    client = CachingScript([reply("ok")])
    told: list[Any] = []
    run = support(client).run("Upgrade me", context={"account": "secret-ledger-77"},
                              on_event=told.append)

    assert run.status == "completed", run.error
    (request,) = client.requests
    (sent,) = [m for m in request.messages if m.kind == DYNAMIC_CONTEXT]
    assert "secret-ledger-77" in sent.text and "gold" in sent.text
    (snapshot,) = Message.objects.filter(conversation_id=run.conversation_id,
                                         kind=DYNAMIC_CONTEXT)
    events = list(run.events())
    assert events and all(e.payload.get("message_id") != snapshot.pk for e in events)
    shown = str([e.payload for e in events])
    assert "secret-ledger-77" not in shown and "gold" not in shown
    # The in-process events (on_event, signals) do not name it either.
    assert snapshot.pk not in [e.payload.get("message_id") for e in told]
    assert [m.kind for m in load_conversation(run.conversation_id).messages()] == ["text", "text"]
