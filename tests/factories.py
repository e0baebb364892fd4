"""factory-boy factories for rows the public API cannot or should not produce.

Use them for corrupted transcripts (the invariant checker's tests) and for bulk history
(bounded-cost tests); build everything else through the public API. ``MessageFactory`` allocates
its sequence like the store unless one is given, so a test can make gaps on purpose.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

import factory
from django.db import transaction
from django.utils import timezone
from factory.django import DjangoModelFactory

from turnkit_django.base.ids import new_id
from turnkit_django.base.states import Phase, ToolStatus, TurnStatus
from turnkit_django.messages import TextPart, ToolCallPart, ToolResultPart, dump_parts
from turnkit_django.models import Conversation, Lease, Message, ToolExecution, Turn
from turnkit_django.store import allocate_sequences

AGENT = "factory-agent"
MODEL = "scripted"


def text(value: str = "hello") -> list[dict[str, Any]]:
    """Return the stored content of one text part."""
    return dump_parts([TextPart(value)])


def calls(*call_ids: str, name: str = "lookup") -> list[dict[str, Any]]:
    """Return the stored content of an assistant message calling ``name`` once per id."""
    return dump_parts([ToolCallPart(call_id, name, {}) for call_id in call_ids])


def result(call_id: str, value: Any = "ok", *, name: str = "lookup") -> list[dict[str, Any]]:
    """Return the stored content of a tool message answering ``call_id``."""
    return dump_parts([ToolResultPart(call_id, name, value)])


class ConversationFactory(DjangoModelFactory):
    class Meta:
        model = Conversation

    agent_name = AGENT
    model = MODEL


class TurnFactory(DjangoModelFactory):
    """A pending root turn; traits ``running``, ``completed``, ``failed``, ``stale``."""

    class Meta:
        model = Turn

    class Params:
        running = factory.Trait(
            status=TurnStatus.RUNNING, fence=1, claimed_by="factory-worker",
            started_at=factory.LazyFunction(timezone.now),
            state={"phase": Phase.MODEL},
        )
        completed = factory.Trait(
            status=TurnStatus.COMPLETED, fence=2, output_text="done",
            started_at=factory.LazyFunction(timezone.now),
            completed_at=factory.LazyFunction(timezone.now),
            state={"phase": Phase.DONE},
        )
        failed = factory.Trait(
            status=TurnStatus.FAILED, fence=2, error={"type": "ModelError", "message": "boom"},
            started_at=factory.LazyFunction(timezone.now),
            completed_at=factory.LazyFunction(timezone.now),
            state={"phase": Phase.DONE},
        )
        stale = factory.Trait(
            status=TurnStatus.STALE, fence=2,
            error={"type": "Stale", "message": "the inline execution was abandoned"},
            started_at=factory.LazyFunction(timezone.now),
            completed_at=factory.LazyFunction(timezone.now),
            state={"phase": Phase.TOOLS},
        )

    conversation = factory.SubFactory(ConversationFactory)
    agent_name = factory.SelfAttribute("conversation.agent_name")
    model = MODEL
    status = TurnStatus.PENDING
    context_sequence = factory.LazyAttribute(
        lambda o: Conversation.objects.filter(pk=o.conversation.pk)
        .values_list("last_sequence", flat=True).first() or 0
    )

    @classmethod
    def _create(cls, model_class: type[Turn], *args: Any, **kwargs: Any) -> Turn:
        """Make the turn its own root unless a root (or a parent) is given."""
        kwargs.setdefault("id", new_id("turn"))
        parent = kwargs.get("parent_turn")
        if "root_turn" not in kwargs and "root_turn_id" not in kwargs:
            kwargs["root_turn_id"] = parent.root_turn_id if parent else kwargs["id"]
        if parent is not None:
            kwargs.setdefault("depth", parent.depth + 1)
        turn = super()._create(model_class, *args, **kwargs)
        if turn.status == TurnStatus.RUNNING:  # a running turn is claimed: it has a lease
            Lease.objects.create(turn=turn, fence=turn.fence, worker=turn.claimed_by,
                                 heartbeat_at=timezone.now())
        return turn


class MessageFactory(DjangoModelFactory):
    """A message; its sequence comes from the store's allocator unless ``sequence`` is given."""

    class Meta:
        model = Message

    turn = None
    conversation = factory.LazyAttribute(
        lambda o: o.turn.conversation if o.turn is not None else ConversationFactory()
    )
    role = "user"
    kind = "text"
    content = factory.LazyFunction(text)
    # Messages of a running or finished claim carry its first fence by default.
    fence = factory.LazyAttribute(lambda o: 1 if o.turn is not None else None)
    sequence = None

    @classmethod
    def _create(cls, model_class: type[Message], *args: Any, **kwargs: Any) -> Message:
        with transaction.atomic():
            if kwargs.get("sequence") is None:
                kwargs["sequence"] = allocate_sequences(kwargs["conversation"].pk)
            return super()._create(model_class, *args, **kwargs)


class ToolExecutionFactory(DjangoModelFactory):
    """A completed tool execution of a call, carrying its turn's first fence."""

    class Meta:
        model = ToolExecution

    turn = factory.SubFactory(TurnFactory, running=True)
    tool_call_id = factory.Sequence(lambda n: f"call_f{n}")
    tool_name = "lookup"
    status = ToolStatus.COMPLETED
    result = "ok"
    fence = 1
    attempts = 1
    started_at = factory.LazyFunction(timezone.now)
    completed_at = factory.LazyFunction(timezone.now)


def tool_turn(*, call_ids: Sequence[str] = ("call_1",), answer: bool = True,
              final: bool = True, **turn_fields: Any) -> Turn:
    """Build a turn with input, one tool batch, its executions and results, and a final reply.

    The transcript is valid; ``answer=False`` leaves the batch without results (and without
    executions), ``final=False`` stops after the results. ``turn_fields`` go to TurnFactory
    (``completed=True`` by default).
    """
    if not turn_fields.keys() & {"status", "running", "completed", "failed", "stale"}:
        turn_fields["completed"] = True
    conversation = turn_fields.pop("conversation", None) or ConversationFactory()
    MessageFactory(conversation=conversation, content=text("do it"))
    turn = TurnFactory(conversation=conversation, **turn_fields)
    MessageFactory(turn=turn, role="assistant", kind="tool_call", content=calls(*call_ids))
    if answer:
        for call_id in call_ids:
            execution = ToolExecutionFactory(turn=turn, tool_call_id=call_id)
            MessageFactory(turn=turn, role="tool", kind="tool_result", content=result(call_id),
                           tool_execution=execution)
    if final:
        MessageFactory(turn=turn, role="assistant", content=text("done"))
    return turn


def create_terminal_turns(count: int, *, per_conversation: int = 1,
                          status: str = TurnStatus.COMPLETED, agent_name: str = AGENT,
                          at: datetime | None = None, batch_size: int = 500) -> list[str]:
    """Bulk-create ``count`` finished root turns (input + reply each) and return their ids.

    Turns are spread over conversations of ``per_conversation`` turns; each conversation's
    sequences are contiguous and match its ``last_sequence``, so the data passes the invariant
    checker. Timestamps are set to ``at`` (default: a day ago) so the rows look historical.
    """
    at = at or timezone.now() - timedelta(days=1)
    error = None if status == TurnStatus.COMPLETED else {"type": "Historical", "message": status}
    conversations: list[Conversation] = []
    turns: list[Turn] = []
    messages: list[Message] = []
    for start in range(0, count, per_conversation):
        conversation = Conversation(id=new_id("conv"), agent_name=agent_name, model=MODEL)
        conversations.append(conversation)
        size = min(per_conversation, count - start)
        for index in range(size):
            turn_id = new_id("turn")
            turns.append(Turn(
                id=turn_id, conversation_id=conversation.pk, root_turn_id=turn_id,
                agent_name=agent_name, model=MODEL, status=status, fence=2,
                context_sequence=2 * index + 1, state={"phase": Phase.DONE}, error=error,
                output_text="done", started_at=at, completed_at=at,
            ))
            messages.extend(_exchange(conversation.pk, turn_id, 2 * index + 1))
        conversation.last_sequence = 2 * size
    with transaction.atomic():
        Conversation.objects.bulk_create(conversations, batch_size=batch_size)
        Turn.objects.bulk_create(turns, batch_size=batch_size)
        Message.objects.bulk_create(messages, batch_size=batch_size)
        ids = [t.pk for t in turns]
        for start in range(0, len(ids), batch_size):
            Turn.objects.filter(pk__in=ids[start:start + batch_size]).update(
                created_at=at, updated_at=at)
    return ids


def _exchange(conversation_id: str, turn_id: str, first: int) -> list[Message]:
    return [
        Message(conversation_id=conversation_id, sequence=first, role="user",
                content=text("question")),
        Message(conversation_id=conversation_id, turn_id=turn_id, sequence=first + 1,
                role="assistant", content=text("answer"), fence=1),
    ]


__all__ = [
    "ConversationFactory",
    "MessageFactory",
    "ToolExecutionFactory",
    "TurnFactory",
    "calls",
    "create_terminal_turns",
    "result",
    "text",
    "tool_turn",
]
