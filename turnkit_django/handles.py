"""The objects applications hold: ``Run``, ``Turn`` and ``Conversation``.

Handles wrap rows and call services; they hold no state the database does not have, so
``refresh()`` is always safe and two handles on one turn agree after refreshing.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import TYPE_CHECKING, Any, Self

from django.db.models import Q, QuerySet, Sum

from . import services
from .clients.base import ModelRequest, Usage
from .messages import TextPart
from .models import Conversation as ConversationRow
from .models import Delivery, Message, ToolExecution
from .models import Turn as TurnRow
from .states import TERMINAL_TURN_STATUSES

if TYPE_CHECKING:
    from .agents import Agent
    from .events import EventCallback
    from .policies import Audit


def _agent_for(row: TurnRow, agent: Agent | None) -> Agent:
    if agent is not None and agent.name == row.agent_name:
        return agent
    from .registry import get_agent

    return get_agent(row.agent_name)


_UNSET: Any = object()


def _authorize_read(conversation: ConversationRow, principal: Any) -> None:
    if principal is not _UNSET:
        from .authorization import authorize

        authorize("read_messages", principal=principal, conversation_id=conversation.pk,
                  conversation_principal=conversation.principal)


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

    @property
    def audit(self) -> Audit | None:
        """The output policies' verdict, when the agent has output policies."""
        from .policies import Audit

        return None if self.row.audit is None else Audit.from_json(self.row.audit)

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
        from .waits import join_for_inline

        self.refresh()
        if self.row.status != "pending":
            raise InvalidTransition(self.row.pk, self.row.status, "execute")
        join_for_inline(self.row)
        execute(self.row.pk, agent=self.agent, on_event=on_event or self._on_event,
                root_id=self.row.root_turn_id)
        return self.refresh()

    def submit(self, callback: Any = None) -> Turn:
        """Hand the turn to background execution; returns at once."""
        target = callback.row if isinstance(callback, Conversation) else callback
        self.row = services.submit(self.row, callback=target)
        return self

    def wait_for(self, *targets: Any, principal: Any = _UNSET) -> Self:
        """Run only after ``targets`` finish, given their results as input; call before submit."""
        options = {} if principal is _UNSET else {"principal": principal}
        self.row = services.add_wait(self.row, targets, **options)
        return self

    def cancel(self, cascade: bool = False, principal: Any = None) -> Self:
        """Cancel the turn (and with ``cascade`` its descendants); a finished turn is unchanged."""
        services.cancel(self.row, cascade=cascade, principal=principal)
        self.refresh()
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
        prompt_mode: str | None = None,
        **options: Any,
    ) -> Run:
        validated = agent.validate_input(input)
        # Runs default to task mode unless the agent chose its own mode.
        mode = prompt_mode or agent.prompt_mode or "task"
        row = services.new_turn(agent, _task_parts(task, validated), prompt_mode=mode,
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

    def messages(self, after: int = 0, *, principal: Any = _UNSET) -> QuerySet[Message]:
        """Messages with a sequence greater than ``after``, in order (a cursor read).

        With ``principal=`` the ``read_messages`` action is authorized first.
        """
        _authorize_read(self.row, principal)
        return Message.objects.filter(conversation_id=self.row.pk, sequence__gt=after).order_by(
            "sequence")

    def turns(self) -> QuerySet[TurnRow]:
        return TurnRow.objects.filter(conversation_id=self.row.pk).order_by("created_at")

    def send_message(self, other: Conversation | ConversationRow, text: str, *, key: str,
                     principal: Any = None, source_turn: Any = None) -> Delivery:
        """Send ``text`` to ``other`` durably, once per ``key`` (a retry returns the same one)."""
        destination = other.row if isinstance(other, Conversation) else other
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
        from .compaction import compact_conversation

        return compact_conversation(self.row.pk, self.agent, focus=focus, keep_last=keep_last,
                                    client=client)

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
