"""The objects applications hold: ``Run``, ``Turn`` and ``Conversation``.

Handles wrap rows and call services; they hold no state the database does not have, so
``refresh()`` is always safe and two handles on one turn agree after refreshing.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from django.db.models import Q, QuerySet, Sum

from . import services
from .clients.base import ModelRequest, Usage
from .messages import TextPart
from .models import Conversation as ConversationRow
from .models import Message, ToolExecution
from .models import Turn as TurnRow
from .states import TERMINAL_TURN_STATUSES

if TYPE_CHECKING:
    from .agents import Agent
    from .events import EventCallback


def _agent_for(row: TurnRow, agent: Agent | None) -> Agent:
    if agent is not None and agent.name == row.agent_name:
        return agent
    from .registry import get_agent

    return get_agent(row.agent_name)


def _task_parts(task: str, input: Any) -> list[TextPart]:
    if input is None:
        return [TextPart(task)]
    rendered = json.dumps(input, indent=2, sort_keys=True, default=str)
    return [TextPart(f"Task: {task}\n\nInput:\n{rendered}")]


class Turn:
    """A turn of a conversation: one unit of agent work with its own status and output."""

    def __init__(self, row: TurnRow, agent: Agent | None = None) -> None:
        self.row = row
        self._agent = agent
        self._on_event: EventCallback | None = None

    # -- identity and status -----------------------------------------------------------

    @property
    def id(self) -> str:
        return self.row.pk

    @property
    def status(self) -> str:
        return self.row.status

    @property
    def is_terminal(self) -> bool:
        return self.row.status in TERMINAL_TURN_STATUSES

    @property
    def agent(self) -> Agent:
        self._agent = _agent_for(self.row, self._agent)
        return self._agent

    @property
    def conversation_id(self) -> str:
        return self.row.conversation_id

    @property
    def output_text(self) -> str:
        return self.row.output_text

    @property
    def output_data(self) -> Any:
        return self.row.output_data

    @property
    def error(self) -> dict[str, Any] | None:
        return self.row.error

    @property
    def usage(self) -> Usage:
        return Usage.from_dict(self.row.usage)

    @property
    def cost(self) -> Decimal | None:
        return None if self.row.cost_unknown else self.row.cost

    def refresh(self) -> Turn:
        self.row.refresh_from_db()
        return self

    # -- reads -----------------------------------------------------------------------

    def messages(self) -> QuerySet[Message]:
        """The turn's input and its own messages, in sequence order."""
        return Message.objects.filter(conversation_id=self.row.conversation_id).filter(
            Q(sequence__lte=self.row.context_sequence) | Q(turn_id=self.row.pk)
        ).order_by("sequence")

    def tool_executions(self) -> QuerySet[ToolExecution]:
        return ToolExecution.objects.filter(turn_id=self.row.pk).order_by("created_at")

    def preview(self) -> ModelRequest:
        """The exact next model request, built without calling the model or writing anything."""
        from .runtime import Execution
        from .store import Claim

        row = TurnRow.objects.select_related("conversation").get(pk=self.row.pk)
        claim = Claim(row.pk, row.root_turn_id, row.conversation_id, row.fence, "preview")
        return Execution(claim, row, self.agent, client=_NoClient()).build_request()

    # -- actions -----------------------------------------------------------------------

    def execute(self, *, on_event: EventCallback | None = None) -> Turn:
        """Execute the pending turn inline, in this process, and return it finished."""
        from .exceptions import InvalidTransition
        from .runtime import execute

        self.refresh()
        if self.row.status != "pending":
            raise InvalidTransition(self.row.pk, self.row.status, "execute")
        execute(self.row.pk, agent=self.agent, on_event=on_event or self._on_event)
        return self.refresh()

    def submit(self, callback: Any = None) -> Turn:
        """Hand the turn to background execution; returns at once."""
        target = callback.row if isinstance(callback, Conversation) else callback
        self.row = services.submit(self.row, callback=target)
        return self

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self.row.pk} {self.row.status}>"


class _NoClient:
    provider = "none"

    def complete(self, request: ModelRequest) -> Any:  # pragma: no cover - never called
        raise AssertionError("preview never calls the model")


class Run(Turn):
    """One bounded task: the root turn of a tree; usage and cost aggregate the tree."""

    @classmethod
    def create(
        cls,
        agent: Agent,
        task: str,
        *,
        input: Any = None,
        on_event: EventCallback | None = None,
        prompt_mode: str | None = "task",
        **options: Any,
    ) -> Run:
        validated = agent.validate_input(input)
        row = services.new_turn(agent, _task_parts(task, validated), prompt_mode=prompt_mode,
                                **options)
        run = cls(row, agent)
        run._on_event = on_event
        return run

    @property
    def root_turn_id(self) -> str:
        return self.row.root_turn_id

    def turns(self) -> QuerySet[TurnRow]:
        """The root and its descendants."""
        return TurnRow.objects.filter(root_turn_id=self.row.root_turn_id).order_by("created_at")

    def messages(self) -> QuerySet[Message]:
        """Every message of every conversation in the tree."""
        conversations = self.turns().values("conversation_id")
        return Message.objects.filter(conversation_id__in=conversations).order_by(
            "conversation__created_at", "sequence")

    def tool_executions(self) -> QuerySet[ToolExecution]:
        return ToolExecution.objects.filter(turn__root_turn_id=self.row.root_turn_id).order_by(
            "created_at")

    @property
    def usage(self) -> Usage:
        total = Usage()
        for usage in self.turns().values_list("usage", flat=True):
            total = total + Usage.from_dict(usage)
        return total

    @property
    def cost(self) -> Decimal | None:
        agg = self.turns().aggregate(total=Sum("cost"))
        if self.turns().filter(cost_unknown=True).exists():
            return None
        return agg["total"] or Decimal(0)

    def execute(self, *, on_event: EventCallback | None = None) -> Run:
        super().execute(on_event=on_event)
        return self

    def submit(self, callback: Any = None) -> Run:
        super().submit(callback)
        return self


class Conversation:
    """A thread over time with one agent."""

    def __init__(self, row: ConversationRow, agent: Agent | None = None) -> None:
        self.row = row
        self._agent = agent

    @classmethod
    def create(cls, agent: Agent, **options: Any) -> Conversation:
        return cls(services.new_conversation(agent, **options), agent)

    @property
    def id(self) -> str:
        return self.row.pk

    @property
    def agent(self) -> Agent:
        if self._agent is None or self._agent.name != self.row.agent_name:
            from .registry import get_agent

            self._agent = get_agent(self.row.agent_name)
        return self._agent

    def say(self, text: str, *, metadata: dict[str, Any] | None = None) -> Message:
        """Append a user message; run nothing."""
        from .store import append_user_message

        return append_user_message(self.row.pk, [TextPart(text)], metadata=metadata)

    def prepare_turn(self, **options: Any) -> Turn:
        """Create a pending turn over the messages so far."""
        row = services.new_turn(self.agent, conversation=self.row, **options)
        return Turn(row, self.agent)

    def ask(self, text: str, *, submit: bool = False, on_event: EventCallback | None = None,
            **options: Any) -> Turn:
        """Say ``text`` and answer it: inline by default, in the background with submit=True."""
        from django.db import transaction

        with transaction.atomic():
            self.say(text)
            turn = self.prepare_turn(**options)
            if submit:
                return turn.submit()
        return turn.execute(on_event=on_event)

    def messages(self, after: int = 0) -> QuerySet[Message]:
        """Messages with a sequence greater than ``after``, in order (a cursor read)."""
        return Message.objects.filter(conversation_id=self.row.pk, sequence__gt=after).order_by(
            "sequence")

    def turns(self) -> QuerySet[TurnRow]:
        return TurnRow.objects.filter(conversation_id=self.row.pk).order_by("created_at")

    def refresh(self) -> Conversation:
        self.row.refresh_from_db()
        return self

    def __repr__(self) -> str:
        return f"<Conversation {self.row.pk} {self.row.agent_name}>"


def load_turn(turn_id: str) -> Turn:
    return Turn(TurnRow.objects.get(pk=turn_id))


def load_run(run_id: str) -> Run:
    row = TurnRow.objects.get(pk=run_id)
    return Run(row)


def load_conversation(conversation_id: str) -> Conversation:
    return Conversation(ConversationRow.objects.get(pk=conversation_id))
