"""What the phases of one claimed turn share: its claim, rows, agent, state and transcript."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from ..agents import AgentDefinition
from ..base import shutdown
from ..clients import Client
from ..events import EventCallback, emit
from ..messages import PRIVATE_MESSAGE_KINDS, ChatMessage
from ..store import Claim, Fenced, History, TurnState, release_session, to_chat
from ..store.reads import turn_deadline
from ..tools.tool import Tool
from ..tools.turn_view import TurnView
from .current_turn import turn_handle
from .streaming import DeltaSink

if TYPE_CHECKING:
    from ..models import Conversation, Message, ToolExecution, Turn


class Suspended(Exception):
    """The turn released its claim to wait (background fan-out, wait_for)."""


class ControlPending(Exception):
    """An application control (pause, steering) waits: handle it at this step boundary."""


class HandBack(Exception):
    """The worker is shutting down: stop at this step boundary and give the turn back."""


#: Runs a child turn inline, to its end (the loop's ``execute``): ``(child, agent, client,
#: on_event)``. The loop sets it, so delegation does not import the loop it runs inside.
ChildRunner = Callable[["Turn", AgentDefinition, Client, "EventCallback | None"], Any]


@dataclass(frozen=True)
class InFlight:
    """A model or tool call this worker is waiting for, and how long it may take."""

    kind: str  # "model", "tool" or "media" (a pending turn's own media call)
    name: str
    limit: float | None
    started: float = field(default_factory=time.monotonic)


@dataclass
class TurnContext:
    """One claimed turn while a worker executes it.

    ``state`` is the last committed loop state and ``visible`` the transcript the turn sees;
    both are kept in memory between the steps this worker commits.
    """

    claim: Claim
    row: Turn
    #: The claim's fenced writes (it remembers the tree's ledger between steps).
    fenced: Fenced
    agent: AgentDefinition
    client: Client
    state: TurnState
    tools: dict[str, Tool]
    #: The transcript the turn sees, with facts about all of it kept up to date.
    history: History
    on_event: EventCallback | None = None
    #: Where the model calls' chunks go while they stream (``on_delta=``), or None.
    deltas: DeltaSink | None = None
    #: The executions of the current batch as the step that recorded the response wrote them
    #: (None: the tools phase reads them from the store), and the ids of executions this worker
    #: committed as ``running`` itself (started without another write).
    batch: dict[str, ToolExecution] | None = None
    started: set[str] = field(default_factory=set)
    child_runner: ChildRunner | None = None
    #: The call in flight now (read by the heartbeat thread).
    in_flight: InFlight | None = None
    #: Once the turn ended: whether other turns wait for it, as its lane's hand-off read it
    #: (None: not read).
    waited_for: bool | None = None
    #: Model and tools steps this worker ran (one per model call, one per batch of tool calls).
    steps: int = 0

    @property
    def conversation(self) -> Conversation:
        return self.row.conversation

    @property
    def background(self) -> bool:
        return self.row.submitted_at is not None

    @property
    def principal(self) -> Any:
        return self.row.principal

    def emit(self, type_: str, **payload: Any) -> None:
        emit(type_, turn_id=self.row.pk, conversation_id=self.row.conversation_id,
             callback=self.on_event, started_at=self.row.started_at, **payload)

    @property
    def visible(self) -> list[ChatMessage]:
        """The messages the turn sees, in sequence order (read them; add with :meth:`remember`)."""
        return self.history.messages

    def remember(self, message: Message) -> None:
        """A message this worker committed: the turn sees it from now on (and, unless it is
        private context, applications are told)."""
        self.history.add(to_chat(message))
        if message.kind not in PRIVATE_MESSAGE_KINDS:
            self.emit("message.created", message_id=message.pk, role=message.role,
                      kind=message.kind)

    def run_child(self, child: Turn, agent: AgentDefinition, client: Client) -> None:
        """Execute ``child`` inline, now, with this turn's event callback."""
        if self.child_runner is None:
            raise RuntimeError("this turn context cannot run child turns")
        self.child_runner(child, agent, client, self.on_event)

    @contextmanager
    def waiting_for(self, kind: str, name: str, limit: float | None) -> Iterator[None]:
        """Mark a model or tool call as in flight while it runs (see :meth:`overdue`); the
        turn's database session goes back to the pool meanwhile (store.sessions)."""
        self.in_flight = InFlight(kind, name, limit)
        release_session()
        try:
            yield
        finally:
            self.in_flight = None

    def overdue(self) -> str | None:
        """Why the call in flight should no longer keep the turn alive, if it should not: past
        its own timeout, or past the tree's deadline (on the database clock)."""
        call = self.in_flight
        if call is None:
            return None
        waited = time.monotonic() - call.started
        if call.limit is not None and waited > call.limit:
            return f"the {call.kind} call {call.name!r} did not return within {call.limit:g}s"
        deadline = self.row.deadline_at
        now = self.fenced.database_now()
        if deadline is not None and now is not None and now >= deadline:
            # The deadline held in memory may have moved later since it was read (a resume or a
            # decided approval elsewhere in the tree): read it again before giving up.
            deadline = turn_deadline(self.row.pk)
            if deadline is not None and now >= deadline:
                return f"the turn's deadline passed during the {call.kind} call {call.name!r}"
        return None

    def check_stop(self) -> None:
        """At a step boundary: raise HandBack when this process is shutting down."""
        if self.background and shutdown.stopping():
            raise HandBack(self.row.pk)

    def handle(self, binding: ToolBinding | None = None) -> TurnView:
        """The public turn handle given to tools (with their ``binding``) and output policies: it
        acts as the running turn (evaluations, output metadata, media) through this context."""
        return turn_handle(self.row, self.agent, self, binding)


@dataclass
class ToolBinding:
    """What the handle a tool gets (``ctx.turn``) is bound to: this claimed turn and the tool
    execution being run. Media calls (``ctx.turn.paint``) write under that claim, keyed
    ``<idempotency key>:<operation>:<n>`` by ``media_calls`` (counted per run of the tool)."""

    ctx: TurnContext
    execution: ToolExecution
    media_calls: int = 0


__all__ = ["ChildRunner", "ControlPending", "HandBack", "InFlight", "Suspended", "ToolBinding",
           "TurnContext"]
