"""Retention scenarios shared by the SQLite and PostgreSQL tiers (issue 35, H7).

A run in conversation A sends a message (the ``send_message`` tool) to conversation B of
another principal; the delivery wakes a reply turn in B inside A's tree. Pruning A deletes A
and its children only: B's turns, messages and events stay, and every invariant holds.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.utils import timezone

from tests.orchestration import answering, scripted
from turnkit_django import Agent, services
from turnkit_django.models import Conversation, Event, Message, ToolExecution, Turn
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.testing.verify import assert_invariants
from turnkit_django.tools import send_message

SENDER = {"tenant": "t1", "user": 1}
OTHER = {"tenant": "t2", "user": 2}


def sent_reply(registered: Any) -> tuple[Any, Turn, Turn]:
    """A's finished run, B, and the reply turn its message woke in B (pending, submitted)."""
    inbox = registered(answering("retention_inbox", "noted")).conversation(principal=OTHER)
    inbox.ask("earlier question", submit=True)
    services.run_turn(inbox.turns().get().pk)
    sender = registered(Agent("retention_sender", tools=[send_message], client=FunctionClient(
        scripted(call("send_message", id="call_send", conversation_id=inbox.id,
                      text="please check"), reply("sent")))))
    run = sender.run("coordinate", principal=SENDER)
    assert run.status == "completed"
    woken = Turn.objects.get(conversation_id=inbox.id, options__woken_by__isnull=False)
    assert woken.root_turn_id == run.id  # the reply belongs to the sender's tree
    return inbox, Turn.objects.get(pk=run.id), woken


def snapshot(conversation_id: str) -> dict[str, Any]:
    turns = Turn.objects.filter(conversation_id=conversation_id)
    return {"turns": sorted(turns.values_list("pk", "status")),
            "messages": sorted(Message.objects.filter(conversation_id=conversation_id)
                               .values_list("pk", "sequence", "turn_id")),
            "executions": sorted(ToolExecution.objects.filter(turn__in=turns)
                                 .values_list("pk", flat=True)),
            "events": sorted(Event.objects.filter(conversation_id=conversation_id)
                             .values_list("pk", "type", "turn_id"))}


def idle(*conversations: str) -> None:
    Conversation.objects.filter(pk__in=conversations).update(
        updated_at=timezone.now() - timedelta(days=40))


def prune() -> int:
    return services.prune(before=timezone.now() - timedelta(days=30))


def pruning_the_sender_keeps_the_reply_in_the_other_conversation(registered: Any) -> None:
    inbox, run, woken = sent_reply(registered)
    assert services.run_turn(woken.pk)
    assert Turn.objects.get(pk=woken.pk).status == "completed"
    before = snapshot(inbox.id)
    assert before["events"]  # the reply's events are part of what must survive
    idle(run.conversation_id)
    assert services.prune(before=timezone.now() - timedelta(days=30), dry_run=True) == 1
    assert prune() == 1
    assert not Conversation.objects.filter(pk=run.conversation_id).exists()
    assert snapshot(inbox.id) == before
    detached = Turn.objects.get(pk=woken.pk)
    assert detached.root_turn_id == detached.pk and detached.parent_turn_id is None
    assert set(Event.objects.filter(turn_id=woken.pk).values_list("root_turn_id", flat=True)) \
        == {woken.pk}
    assert_invariants()
    # The other conversation is still usable, and prunable in its turn.
    idle(inbox.id)
    assert prune() == 1 and not Conversation.objects.filter(pk=inbox.id).exists()
    assert_invariants()


def a_pending_reply_keeps_the_sender_from_being_pruned(registered: Any) -> None:
    inbox, run, woken = sent_reply(registered)
    assert Turn.objects.get(pk=woken.pk).status == "pending"
    before = snapshot(inbox.id)
    idle(run.conversation_id)
    assert services.prune(before=timezone.now() - timedelta(days=30), dry_run=True) == 0
    assert prune() == 0
    assert Turn.objects.filter(pk=run.pk).exists()
    assert snapshot(inbox.id) == before
    assert_invariants()
    # Once the reply has finished, the sender goes and the reply stays.
    assert services.run_turn(woken.pk)
    after = snapshot(inbox.id)
    assert prune() == 1
    assert snapshot(inbox.id) == after
    assert_invariants()
