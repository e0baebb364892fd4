"""The objects applications hold: ``Agent``, ``Run``, ``Turn`` and ``Conversation``.

Handles wrap rows and call services; they hold no state the database does not have, so
``refresh()`` is always safe and two handles on one turn agree after refreshing. Inside the
package the handle classes are ``TurnHandle`` and ``ConversationHandle`` (the models are
``Turn`` and ``Conversation``); the package exports them as ``Turn`` and ``Conversation``.
``TurnHandle`` and ``Run`` live in :mod:`turnkit_django.api.turn_handles`; this module re-exports
them.
"""

from __future__ import annotations

from typing import Any, Self, Unpack

from django.db.models import QuerySet

from .. import services
from ..agents import AgentDefinition, get_agent
from ..base.ids import new_id
from ..base.serialization import JsonObject, json_value, snapshot
from ..events import EventCallback
from ..messages import Part
from ..models import Conversation, Delivery, Message, Turn
from ..runtime import execute_new, refuse_atomic_block
from ..runtime.authorization import authorize
from ..runtime.current_turn import provide
from ..runtime.submission import authorize_callback
from ..services.costs import CostBreakdown
from ..store import input_checks, reload
from .interactive import AsyncRuns, ConversationInputs
from .options import ConversationOptions, RunOptions, TurnOptions
from .options import only as _only
from .turn_handles import Run, TurnHandle

_UNSET: Any = object()


def _authorize_read(conversation: Conversation, principal: Any) -> None:
    if principal is not _UNSET:
        authorize("read_messages", principal=principal, conversation_id=conversation.pk,
                  conversation_principal=conversation.principal)


class Agent(AsyncRuns, AgentDefinition):
    """A named agent: instructions, model, tools, sub-agents and limits, and how to use it.

    Agents are definitions, not state: create them at import time in ``<app>/agents.py`` and
    ``register()`` them so every process can rebuild their turns by name.
    """

    def run(self, task: str, **options: Unpack[RunOptions]) -> Run:
        """Run a bounded task inline, in this process, and return the finished Run."""
        _only("run", options, RunOptions)
        refuse_atomic_block("agent.run()")
        return Run.start(self, task, **options)

    def prepare(self, task: str, **options: Unpack[RunOptions]) -> Run:
        """Create a pending run without executing or submitting it."""
        _only("prepare", options, RunOptions)
        return Run.create(self, task, **options)

    def submit(self, task: str, *, callback: Any = None, **options: Unpack[RunOptions]) -> Run:
        """Create a run and hand it to background execution; returns at once."""
        _only("submit", options, RunOptions)
        input_checks.event_callback(options.get("on_event"), inline=False)
        if callback is None:  # created submitted: one write
            return Run.create(self, task, _submitted=True, **options)
        target = input_checks.conversation_row(callback, "submit(callback=...)")  # before the run
        turn_id = new_id("turn")  # the callback is asked before the run exists too
        authorize_callback(turn_id, json_value(options.get("principal"), "principal"), target)
        run = Run.create(self, task, _turn_id=turn_id, **options)
        run.row = services.submit(run.row, callback=target, callback_authorized=True)
        return run

    def conversation(self, **options: Unpack[ConversationOptions]) -> ConversationHandle:
        """Start a conversation with this agent."""
        _only("conversation", options, ConversationOptions)
        return ConversationHandle.create(self, **options)

    def cost_breakdown(self) -> CostBreakdown:
        """Usage and cost of every turn this agent ran, per model and per turn."""
        return services.cost_breakdown(agent_name=self.name)


class ConversationHandle(ConversationInputs):
    """A thread over time with one agent."""

    def __init__(self, row: Conversation, agent: AgentDefinition | None = None) -> None:
        self.row = row
        self._agent = agent

    @classmethod
    def create(cls, agent: AgentDefinition,
               **options: Unpack[ConversationOptions]) -> ConversationHandle:
        _only("Conversation.create", options, ConversationOptions)
        return cls(services.new_conversation(agent, **options), agent)

    @property
    def id(self) -> str:
        return self.row.pk

    @property
    def agent(self) -> AgentDefinition:
        if self._agent is None or self._agent.name != self.row.agent_name:
            self._agent = get_agent(self.row.agent_name)
        return self._agent

    def say(self, text: str, *, metadata: JsonObject | None = None,
            key: str | None = None) -> Message:
        """Append a user message; run nothing. With ``key``, once per key."""
        input_checks.require_text(text, "the text of conv.say()")
        metadata = None if metadata is None else snapshot(metadata, "metadata")
        return services.say(self.row, text, metadata=metadata, key=key)

    def prepare_turn(self, **options: Unpack[TurnOptions]) -> TurnHandle:
        """Create a pending turn over the messages so far."""
        _only("prepare_turn", options, TurnOptions)
        row = services.new_turn(self.agent, conversation=self.row, **options)
        return TurnHandle(row, self.agent)

    def ask(self, text: str, *, submit: bool = False, on_event: EventCallback | None = None,
            key: str | None = None, **options: Unpack[TurnOptions]) -> TurnHandle:
        """Say ``text`` and answer it: inline by default, in the background with submit=True.

        With ``key`` the input is idempotent: a retry returns the turn the first call started
        (KeyConflict if the text differs), and appends nothing.
        """
        _only("ask", options, TurnOptions)
        input_checks.require_text(text, "the text of conv.ask()")
        input_checks.flag(submit, "conv.ask(): submit=")
        input_checks.event_callback(on_event, inline=not submit)
        if not submit:
            refuse_atomic_block("conversation.ask()")

        def create(parts: list[Part], key: str | None) -> Turn:
            if not submit:
                return execute_new(self.agent, parts, conversation=self.row,
                                   on_event=on_event, message_key=key, **options)
            # The input and the turn handed to background execution, in one write.
            return services.new_turn(self.agent, parts, conversation=self.row,
                                     message_key=key, submit=True, **options)

        return TurnHandle(services.answer_once(self.row, text, key, create), self.agent)

    def messages(self, after: int = 0, *, principal: Any = _UNSET,
                 include_private: bool = False) -> QuerySet[Message]:
        """Messages with a sequence greater than ``after``, in order (a cursor read), without
        thinking, provider-only parts and dynamic context unless ``include_private``.

        With ``principal=`` the ``read_messages`` action is authorized first.
        """
        _authorize_read(self.row, principal)
        rows = Message.objects.after(self.row.pk, input_checks.cursor(after, "conv.messages()"))
        return rows if include_private else rows.provider_safe()

    def turns(self) -> QuerySet[Turn]:
        return Turn.objects.filter(conversation_id=self.row.pk).order_by("created_at")

    def cost_breakdown(self) -> CostBreakdown:
        """Usage and cost of the conversation's turns (not their sub-agents'), per model."""
        return services.cost_breakdown(conversation_id=self.row.pk)

    def send_message(self, other: ConversationHandle | Conversation | str, text: str, *, key: str,
                     principal: Any = None, source_turn: Any = None) -> Delivery:
        """Send ``text`` to ``other`` durably, once per ``key`` (a retry returns the same one)."""
        destination = input_checks.conversation_row(other, "conv.send_message()")
        turn = getattr(source_turn, "row", source_turn)
        return services.send_message(self.row, destination, text, key=key, principal=principal,
                                     source_turn=turn)

    def inbox(self, *, principal: Any = _UNSET) -> QuerySet[Delivery]:
        """Deliveries sent to this conversation, oldest first (pending ones included)."""
        _authorize_read(self.row, principal)
        return Delivery.objects.filter(destination_conversation_id=self.row.pk).order_by(
            "created_at", "id")

    def outbox(self, *, principal: Any = _UNSET) -> QuerySet[Delivery]:
        """Deliveries this conversation sent, oldest first."""
        _authorize_read(self.row, principal)
        return Delivery.objects.filter(source_conversation_id=self.row.pk).order_by(
            "created_at", "id")

    def compact(self, focus: str | None = None, *, keep_last: int | None = None,
                client: Any = None) -> Message:
        """Summarise older messages now; later turns see the summary in their place.

        Raises CompactionError when there is too little to compact, a turn is active, or the
        summary comes back empty. Originals stay in the transcript.
        """
        return services.compact_conversation(self.row.pk, self.agent, focus=focus,
                                             keep_last=keep_last, client=client)

    def refresh(self) -> Self:
        """Read the turn's row again (its status, output, usage...)."""
        reload(self.row)
        return self

    def __repr__(self) -> str:
        return f"<Conversation {self.row.pk} {self.row.agent_name}>"


def load_turn(turn_id: str) -> TurnHandle:
    return TurnHandle(input_checks.turn_row(turn_id, "load_turn()"))


def load_run(run_id: str) -> Run:
    return Run(input_checks.turn_row(run_id, "load_run()"))


def load_conversation(conversation_id: str) -> ConversationHandle:
    row = input_checks.conversation_by_id(conversation_id, "load_conversation()")
    return ConversationHandle(row)


# Tools, policies and contributors get these handles (mypy checks TurnHandle is a TurnView).
provide(TurnHandle)

__all__ = ["Agent", "ConversationHandle", "ConversationOptions", "Run", "RunOptions",
           "TurnHandle", "TurnOptions", "load_conversation", "load_run", "load_turn"]
