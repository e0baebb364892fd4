"""Compaction: automatic and manual summaries replace older messages only in model requests."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import pairwise
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from tests.helpers import crash_and_resume
from turnkit_django import Agent, CompactionError, ConfigurationError, tool
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import Message, Turn
from turnkit_django.testing import Entry, FunctionClient, ScriptedClient, call, reply

pytestmark = pytest.mark.django_db

SMALL = {"context_limit": 2000, "reserved_tokens": 0, "threshold": 0.5, "tail_messages": 2}
ONE = {"input_tokens": 1, "output_tokens": 1}
SUMMARY_USAGE = {"input_tokens": 100, "output_tokens": 10}


@tool
def fetch_page(page: int) -> str:
    """Fetch a page of the report."""
    return f"page {page}: " + "lorem ipsum " * 100


def purpose(request: ModelRequest) -> str | None:
    return request.metadata.get("purpose")


class Model:
    """Scripted agent steps; every summary request gets the next numbered summary."""

    def __init__(self, steps: list[Entry], summaries: Iterator[str] | None = None) -> None:
        self.steps = iter(steps)
        self.summaries = summaries
        self.count = 0
        self.client = FunctionClient(self.respond)

    def respond(self, request: ModelRequest) -> Entry:
        if purpose(request) == "compaction":
            self.count += 1
            text = next(self.summaries) if self.summaries else f"summary {self.count}"
            return reply(text, usage=SUMMARY_USAGE)
        return next(self.steps)

    def agent_requests(self) -> list[ModelRequest]:
        return [r for r in self.client.requests if purpose(r) is None]


def pages(count: int) -> list[Entry]:
    return [*(call("fetch_page", page=n, usage=ONE) for n in range(1, count + 1)),
            reply("Report read.", usage=ONE)]


def summaries_of(conversation_id: str) -> list[Message]:
    return list(Message.objects.filter(conversation_id=conversation_id,
                                       kind="context_summary").order_by("sequence"))


def assert_well_formed(request: ModelRequest) -> None:
    """Every tool call has its result, and user and assistant turns alternate."""
    calls = [c.id for m in request.messages for c in m.tool_calls]
    results = [r.tool_call_id for m in request.messages for r in m.tool_results]
    assert sorted(calls) == sorted(results)
    roles = [m.role for m in request.messages]
    assert not any(a == b != "tool" for a, b in pairwise(roles)), roles


def test_automatic_compaction_replaces_the_range_in_the_request_only(
    valid_transcript: Any,
) -> None:
    model = Model(pages(6))
    run = Agent("reader", tools=[fetch_page], compaction=SMALL,
                client=model.client).run("Read the report")
    assert run.status == "completed", run.error
    first, _ = summaries_of(run.conversation_id)
    assert first.role == "assistant" and first.metadata["auto"] is True
    assert first.metadata["turn_id"] == run.id
    start, end = first.metadata["replaced_range"]
    assert start == 1

    requests = model.agent_requests()
    for request in requests:
        assert_well_formed(request)
    after = next(r for r in requests if any(m.kind == "context_summary" for m in r.messages))
    summary, *rest = after.messages  # the tail starts with an assistant message: one user turn
    assert summary.role == "user" and summary.kind == "context_summary"
    assert summary.text.startswith("Summarise our conversation so far.")
    assert summary.text.endswith("summary 1") and "the later message wins" in summary.text
    assert all(m.sequence is not None and m.sequence > end for m in rest)
    assert not any(m.sequence is not None and start <= m.sequence <= end for m in rest)

    # The stored transcript keeps every original message.
    kinds = valid_transcript(run.conversation_id)
    assert kinds.count(("tool", "tool_result")) == 6
    assert kinds.count(("assistant", "context_summary")) == 2


def test_a_newer_summary_supersedes_the_older_one() -> None:
    model = Model(pages(6))
    run = Agent("reader", tools=[fetch_page], compaction=SMALL,
                client=model.client).run("Read the report")
    first, second = summaries_of(run.conversation_id)
    assert second.metadata["replaced_range"][0] == first.metadata["replaced_range"][0]
    assert second.metadata["replaced_range"][1] > first.metadata["replaced_range"][1]
    second_summary_request = [r for r in model.client.requests if purpose(r) == "compaction"][1]
    assert "summary 1" in second_summary_request.messages[0].text  # the older one is folded in
    final = model.agent_requests()[-1]
    shown = [m for m in final.messages if m.kind == "context_summary"]
    assert len(shown) == 1 and shown[0].text.endswith("summary 2")


def test_summariser_usage_is_charged_to_the_turn() -> None:
    model = Model(pages(6))
    run = Agent("reader", tools=[fetch_page], compaction=SMALL,
                client=model.client).run("Read the report")
    row = Turn.objects.get(pk=run.id)
    assert row.usage["input_tokens"] == 7 * 1 + 2 * 100
    assert row.usage["output_tokens"] == 7 * 1 + 2 * 10
    assert row.tree_iterations == 7  # summaries reserve no iteration
    summary = summaries_of(run.conversation_id)[0]
    assert summary.metadata["usage"]["input_tokens"] == 100


def test_a_tool_call_is_never_split_from_its_results() -> None:
    steps: list[Entry] = [
        call("fetch_page", page=1, usage=ONE),
        [call("fetch_page", page=2), call("fetch_page", page=3)],
        reply("Done.", usage=ONE),
    ]
    model = Model(steps)
    options = {**SMALL, "tail_messages": 1}  # a tail of one would start inside the batch
    run = Agent("reader", tools=[fetch_page], compaction=options,
                client=model.client).run("Read")
    assert run.status == "completed", run.error
    (summary,) = summaries_of(run.conversation_id)
    end = summary.metadata["replaced_range"][1]
    batch = Message.objects.filter(turn_id=run.id, kind="tool_call").order_by("sequence")[1]
    assert end < batch.sequence  # the whole batch stayed in the tail
    for request in model.agent_requests():
        assert_well_formed(request)


def test_failed_automatic_compaction_is_ignored() -> None:
    model = Model(pages(3), summaries=iter(["   "] * 5))
    run = Agent("reader", tools=[fetch_page], compaction=SMALL,
                client=model.client).run("Read")
    assert run.status == "completed", run.error
    assert summaries_of(run.conversation_id) == []


def test_compaction_can_be_switched_off_per_agent_and_globally() -> None:
    model = Model(pages(4))
    Agent("off", tools=[fetch_page], compaction=False, client=model.client).run("Read")
    assert model.count == 0
    with override_settings(TURNKIT={**settings.TURNKIT, "COMPACTION": False}):
        model = Model(pages(4))
        Agent("global_off", tools=[fetch_page], compaction=SMALL,
              client=model.client).run("Read")
        assert model.count == 0
    with override_settings(TURNKIT={**settings.TURNKIT, "COMPACTION": SMALL}):
        model = Model(pages(4))
        Agent("global_on", tools=[fetch_page], client=model.client).run("Read")
        assert model.count >= 1


@pytest.mark.parametrize(("value", "message"), [
    ({"limit": 10}, "unknown compaction options"),
    ({"threshold": 1.5}, "threshold must be in"),
    ({"tail_messages": -1}, "tail_messages must be an integer"),
    ({"context_limit": 100, "reserved_tokens": 200}, "must exceed reserved_tokens"),
    ("yes", "must be True, False or a dict"),
])
def test_compaction_options_are_validated(value: Any, message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        Agent("bad", compaction=value)


def test_a_bad_global_compaction_setting_is_a_system_check_error() -> None:
    from turnkit_django.checks import check_settings

    with override_settings(TURNKIT={**settings.TURNKIT, "COMPACTION": {"treshold": 0.5}}):
        errors = [m for m in check_settings() if m.id == "turnkit.E020"]
    assert len(errors) == 1 and "unknown compaction options ['treshold']" in errors[0].msg
    assert not [m for m in check_settings() if m.id == "turnkit.E020"]


def test_a_global_compaction_of_none_is_refused_not_read_as_on() -> None:
    """None was read as True: ``COMPACTION = None`` written to switch it off left it on. Like
    every setting whose default is not None, None is an error (E020), and a run fails saying
    so before its first model call; an agent's ``compaction=None`` still means the setting's."""
    from turnkit_django.checks import check_settings

    with override_settings(TURNKIT={**settings.TURNKIT, "COMPACTION": None}):
        (error,) = [m for m in check_settings() if m.id == "turnkit.E020"]
        assert "TURNKIT['COMPACTION'] must be True, False or a dict" in error.msg
        assert "got None" in error.msg and "use False" in (error.hint or "")
        client = ScriptedClient([reply("unused")])
        run = Agent("none", client=client).run("Read")
        assert run.status == "failed" and run.error["type"] == "InvalidSetting"
        assert client.requests == []
        assert "TURNKIT['COMPACTION'] must be True, False or a dict" in run.error["message"]
    model = Model(pages(4))
    Agent("unset", tools=[fetch_page], compaction=None, client=model.client).run("Read")


def test_unknown_options_of_mixed_key_types_are_named_not_a_type_error() -> None:
    """sorted() of {1, "x"} raised TypeError out of the system check (and out of Agent())."""
    from turnkit_django.checks import check_settings

    with override_settings(TURNKIT={**settings.TURNKIT, "COMPACTION": {1: 2, "x": 3}}):
        (error,) = [m for m in check_settings() if m.id == "turnkit.E020"]
    assert "unknown compaction options [1, 'x']" in error.msg
    with pytest.raises(ConfigurationError, match=r"unknown compaction options \[1, 'x'\]"):
        Agent("bad", compaction={1: 2, "x": 3})


def test_crash_after_a_summary_resumes_without_summarising_again(
    registered: Any, background: None
) -> None:
    model = Model(pages(3))
    agent = registered(Agent("reader", tools=[fetch_page], compaction=SMALL,
                             client=model.client))
    run = agent.prepare("Read").submit()
    crash_and_resume(run.id, "after_compaction_commit")
    assert run.refresh().status == "completed", run.error
    assert len(summaries_of(run.conversation_id)) == 1
    assert model.count == 1


# --------------------------------------------------------------------------- manual


def chatty_conversation(client: Any, turns: int = 3) -> Any:
    conv = Agent("chat", client=client).conversation()
    for n in range(turns):
        conv.ask(f"Question {n} about the billing migration")
    return conv


def test_manual_compaction_appends_a_summary_the_next_turn_sees() -> None:
    client = ScriptedClient([reply("a0"), reply("a1"), reply("a2"),
                             reply("Billing: moving to v2."), reply("next")])
    conv = chatty_conversation(client)
    summary = conv.compact(focus="billing migration", keep_last=2)
    assert summary.kind == "context_summary" and summary.turn_id is None
    assert summary.metadata["replaced_range"] == [1, 4]
    assert summary.metadata["focus"] == "billing migration"
    assert "Pay most attention to: billing migration" in client.requests[3].messages[0].text
    conv.ask("And now?")
    texts = [m.text for m in client.requests[-1].messages]
    assert texts[0] == "Summarise our conversation so far."
    assert texts[1].endswith("Billing: moving to v2.")
    assert texts[2:] == ["Question 2 about the billing migration", "a2", "And now?"]
    assert conv.messages().count() == 9  # six originals, the summary, the new pair


def test_manual_compaction_with_an_empty_summary_raises_a_clear_error() -> None:
    conv = chatty_conversation(ScriptedClient([reply("a0"), reply("a1"), reply("a2"),
                                               reply("  ")]))
    before = conv.messages().count()
    with pytest.raises(CompactionError, match="empty summary"):
        conv.compact(keep_last=2)
    assert conv.messages().count() == before


def test_manual_compaction_needs_enough_messages() -> None:
    conv = chatty_conversation(ScriptedClient([reply("a0")]), turns=1)
    with pytest.raises(CompactionError, match="too few messages"):
        conv.compact()
