"""Context that does not grow in cost with the conversation (issue 11).

A turn reads only the messages its process has not read yet (``store.seen``), a message's size
for the token estimate is computed once, and compaction's cut search is one pass that pairs each
result with its own call even when a provider reuses call ids from turn to turn.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from turnkit_django import Agent
from turnkit_django.messages import ChatMessage, TextPart, ToolCallPart, ToolResultPart
from turnkit_django.runtime.compaction import choose
from turnkit_django.store.seen import SEEN, Prefix, Seen
from turnkit_django.testing import FunctionClient, reply


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
    with CaptureQueriesContext(connection) as queries:
        conversation.ask("question 3")
    reads = [q["sql"] for q in queries.captured_queries
             if q["sql"].startswith("SELECT") and '"turnkit_message"' in q["sql"]]
    # The previous turn's input ended at its question (5); its answer (6) is read now.
    assert len(reads) == 1 and '"sequence" > 5' in reads[0], reads
    assert seen == [["question 0", "ok", "question 1", "ok", "question 2", "ok", "question 3"]]

    SEEN.clear()  # another process: reads the whole conversation, and sees the same
    seen.clear()
    conversation.ask("question 4")
    assert seen[0][-3:] == ["question 3", "ok", "question 4"] and len(seen[0]) == 9
