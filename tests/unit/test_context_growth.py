"""Context that does not grow in cost with the conversation (issue 11).

A turn reads only the messages its process has not read yet (``store.seen``), a message's size
for the token estimate is computed once, and compaction's cut search is one pass that pairs each
result with its own call even when a provider reuses call ids from turn to turn.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

import pytest
from django.db import connection

from turnkit_django import Agent, tool
from turnkit_django.clients import ModelRequest
from turnkit_django.messages import ChatMessage, TextPart, ToolCallPart, ToolResultPart
from turnkit_django.models import Turn
from turnkit_django.runtime.compaction import choose, project
from turnkit_django.store import visible_chat
from turnkit_django.store.seen import SEEN, History, Prefix, Seen
from turnkit_django.testing import Entry, FunctionClient, call, reply


@tool
def probe(label: str) -> dict[str, object]:
    """Return what the probe says."""
    return {"label": label, "reading": 3}


def calls_probe(request: ModelRequest) -> Entry:
    """Call the probe once per ask, then answer."""
    if request.messages[-1].role == "tool":
        return reply("the probe says 3")
    return call("probe", label="x")


def turn_messages(sequence: int, call_id: str) -> list[ChatMessage]:
    """One ask with one tool call: question, call, result, answer."""
    return [
        ChatMessage("user", (TextPart(f"question {sequence}"),), sequence=sequence),
        ChatMessage("assistant", (ToolCallPart(call_id, "probe", {}),), sequence=sequence + 1),
        ChatMessage("tool", (ToolResultPart(call_id, "probe", {"ok": True}),), "tool_result",
                    sequence=sequence + 2),
        ChatMessage("assistant", (TextPart("answer"),), sequence=sequence + 3),
    ]


def test_the_cut_pairs_results_with_their_own_call_when_ids_repeat_across_turns():
    history = [m for ask in range(200) for m in turn_messages(ask * 4 + 1, "call_0")]
    chosen = choose(history, keep_last=6)
    assert chosen is not None
    head, (start, end) = chosen
    # The greatest cut that keeps six messages and falls between no call and its result.
    tail = history[len(head):]
    assert len(head) == 793 and len(tail) == 7
    assert tail[0].tool_calls and not tail[0].tool_results
    assert (start, end) == (1, 793)


def test_the_cut_never_separates_a_call_from_its_result():
    history = turn_messages(1, "a") + turn_messages(5, "b")
    head, _ = choose(history, keep_last=2) or pytest.fail("a cut exists")
    assert [m.sequence for m in head] == [1, 2, 3, 4, 5]  # not after the call at 6


def test_a_message_size_is_computed_once():
    message = ChatMessage("user", (TextPart("hello"),))
    assert message.size == message.size == len('[{"type": "text", "text": "hello"}]')
    assert "size" in vars(message)


def test_the_cache_forgets_the_least_recently_used_conversation():
    seen = Seen(size=2)
    for name in "abc":
        seen.put(name, Prefix(1, ()))
    assert seen.get("a", 5) is None
    assert seen.get("b", 5) is not None and seen.get("c", 5) is not None
    # A prefix past the turn's input is never used (a turn resumed from an older input).
    assert seen.get("b", 0) is None


@contextmanager
def message_reads() -> Iterator[list[tuple[str, tuple[object, ...]]]]:
    """The reads of messages sent meanwhile, with their parameters (however they are bound)."""
    reads: list[tuple[str, tuple[object, ...]]] = []

    def wrapper(execute, sql, params, many, context):  # type: ignore[no-untyped-def]
        if sql.startswith("SELECT") and '"turnkit_message"' in sql:
            reads.append((sql, tuple(params or ())))
        return execute(sql, params, many, context)

    with connection.execute_wrapper(wrapper):
        yield reads


@pytest.mark.django_db(transaction=True)
def test_the_next_ask_reads_only_the_messages_it_has_not_seen(registered):
    agent = registered(Agent("growth", client=FunctionClient(lambda r: reply("ok"))))
    conversation = agent.conversation()
    for n in range(3):
        conversation.ask(f"question {n}")
    seen = []

    def record(request):  # type: ignore[no-untyped-def]
        seen.append([m.text for m in request.messages])
        return reply("ok")

    agent.client = FunctionClient(record)
    with message_reads() as reads:
        conversation.ask("question 3")
    # The previous turns ran in this process: it holds every message before the new input.
    assert reads == []
    assert seen == [["question 0", "ok", "question 1", "ok", "question 2", "ok", "question 3"]]

    conversation.say("a note written outside any turn of this process")
    with message_reads() as reads:
        conversation.ask("question 4")
    # One message (9) was written by someone else: the ask reads past the last it holds (8).
    assert len(reads) == 1 and reads[0][1][-1] == 8, reads
    assert seen[-1][-3:] == ["ok", "a note written outside any turn of this process",
                             "question 4"]

    SEEN.clear()  # another process: reads the whole conversation, and sees the same
    seen.clear()
    conversation.ask("question 5")
    assert seen[0][-3:] == ["question 4", "ok", "question 5"] and len(seen[0]) == 12


@pytest.mark.django_db(transaction=True)
def test_the_history_a_turn_leaves_behind_is_what_the_database_holds(registered):
    """The messages a turn remembers are the rows as a later read returns them, tool calls,
    results and all (so another process's next turn sees exactly the same transcript)."""
    agent = registered(Agent("growth-tools", tools=[probe], client=FunctionClient(calls_probe)))
    conversation = agent.conversation()
    for n in range(3):
        conversation.ask(f"question {n}")
    remembered = SEEN.get(conversation.id, 10_000)
    assert remembered is not None and remembered.upto == 12
    turn = Turn.objects.filter(conversation_id=conversation.id).latest("created_at")
    SEEN.clear()
    assert list(remembered.messages) == visible_chat(turn)


def summary(sequence: int, start: int, end: int) -> ChatMessage:
    return ChatMessage("assistant", (TextPart(f"summary {sequence}"),), "context_summary",
                       sequence, {"replaced_range": [start, end]})


def projected_by_definition(messages: list[ChatMessage]) -> list[int | None]:
    """The newest summary's range and every summary removed, the newest summary leading."""
    latest = [m for m in messages if m.kind == "context_summary"][-1]
    start, end = latest.metadata["replaced_range"]
    kept = [m.sequence for m in messages if m.kind != "context_summary"
            and not (m.sequence is not None and start <= m.sequence <= end)]
    return [latest.sequence, *kept]


@pytest.mark.parametrize("summaries", [
    [(21, 1, 12)],
    [(21, 1, 12), (40, 1, 30)],
    # The second range ends before the first summary: the tail the first kept is cut again.
    [(21, 1, 12), (30, 1, 14)],
    [(21, 1, 12), (30, 1, 14), (44, 1, 35)],
])
def test_projection_reads_back_from_the_summary_only_as_far_as_its_range(summaries):
    replaced = {s for s, _, _ in summaries}
    last = summaries[-1][0] + 6
    messages = [summary(n, *next((a, b) for s, a, b in summaries if s == n)) if n in replaced
                else ChatMessage("user" if n % 2 else "assistant", (TextPart(f"m{n}"),),
                                 sequence=n)
                for n in range(1, last + 1)]
    shown = [m.sequence for m in project(messages) if m.kind != "context_summary_request"]
    assert shown == projected_by_definition(messages)


def numbered(*sequences: int) -> list[ChatMessage]:
    return [ChatMessage("user", (TextPart(f"m{n}"),), sequence=n) for n in sequences]


def test_a_history_keeps_its_facts_as_messages_are_added():
    history = History.of(numbered(1, 2))
    assert history.whole and history.kinds == {"text"} and history.call_ids == set()
    history.add(ChatMessage("assistant", (ToolCallPart("c1", "probe", {}),), "tool_call", 3))
    assert history.whole and history.call_ids == {"c1"} and "tool_call" in history.kinds
    history.add(numbered(5)[0])  # 4 was written by someone else: no longer the whole history
    assert not history.whole
    assert [m.sequence for m in history.messages] == [1, 2, 3, 5]


def test_a_history_takes_the_facts_of_a_known_prefix_without_looking_at_its_messages():
    known = Prefix(2, tuple(numbered(1, 2)), frozenset({"text", "image"}), frozenset({"c9"}))
    history = History.of([*known.messages, *numbered(3)], known)
    assert history.kinds == {"text", "image"} and history.call_ids == {"c9"} and history.whole
    # A prefix that ends before the first message read after it leaves a gap.
    assert not History.of([*known.messages, *numbered(4)], known).whole
