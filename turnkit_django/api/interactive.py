"""The interactive controls of the handles: approvals, pause/resume, steering, post, events,
waiting for a run (``run.wait()``, ``run.await_result()``), forks and retries.

Mixed into :class:`~turnkit_django.api.handles.TurnHandle` (``Run`` adds :class:`TreeControls`) and
:class:`~turnkit_django.api.handles.ConversationHandle`; the work is in ``services``.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from copy import copy
from typing import Any, Self

from asgiref.sync import sync_to_async
from django.db.models import QuerySet

from ..base.databases import unit
from ..base.serialization import JsonObject
from ..base.states import TurnStatus
from ..events import EventCallback
from ..exceptions import AtomicBlockError
from ..models import Conversation, Delivery, Event, ToolExecution, Turn
from ..runtime import execute, refuse_atomic_block
from ..services import approvals, awaiting, controls, forks, inputs, streaming
from ..services.inputs import InputStatus
from ..services.reading import readable_conversations
from ..store import reload
from ..store.input_checks import cursor, optional_count

_UNSET: object = object()
#: The largest LIMIT every database takes (a bigint).
MAX_LIMIT = 2**63 - 1


class TurnControls:
    """Approve, deny, pause, resume, steer, and read the tree's durable events."""

    row: Turn
    _on_event: EventCallback | None
    #: Whether approvals are the whole tree's (a Run) or this turn's only (a TurnHandle).
    _approvals_of_tree: bool = False

    @property
    def agent(self) -> Any:  # pragma: no cover - provided by the handle
        raise NotImplementedError

    def _continue_inline(self, turn_id: str) -> None:
        """Execute a decided or resumed inline turn now, in this process (its caller's)."""
        refuse_atomic_block("continuing an inline run after a decision or resume",
                            AtomicBlockError.CONTINUE)
        row = Turn.objects.filter(pk=turn_id).only("status", "submitted_at").first()
        if row is not None and row.status == TurnStatus.PENDING and row.submitted_at is None:
            agent = self.agent if turn_id == self.row.pk else None
            execute(turn_id, agent=agent, on_event=self._on_event,
                    root_id=self.row.root_turn_id)

    def approve(self, call_id: str, *, principal: object = None,
                arguments: JsonObject | None = None) -> ToolExecution:
        """Let the parked tool call ``call_id`` run (with ``arguments``, re-validated, if
        given); an inline turn continues now. Approving twice is a no-op.

        ``call_id`` is the execution id (``execution_id`` of the ``approval.requested`` event,
        ``.id`` of a ``pending_approvals()`` entry) or the model's tool call id. A run decides
        the calls of its whole tree, and raises ApprovalError when a tool call id names the
        requests of more than one turn; a turn handle decides its own turn's calls only."""
        return self._decide(call_id, "approved", principal=principal, arguments=arguments)

    def deny(self, call_id: str, *, reason: str = "", principal: object = None) -> ToolExecution:
        """Refuse the parked tool call ``call_id``: the model reads the denial as its result."""
        return self._decide(call_id, "denied", principal=principal, reason=reason)

    def _decide(self, call_id: str, state: str, **options: Any) -> ToolExecution:
        turn_id = None if self._approvals_of_tree else self.row.pk
        decision = approvals.decide(self.row.root_turn_id, call_id, state, turn_id=turn_id,
                                    **options)
        if decision.execute_inline:
            self._continue_inline(decision.continue_id or decision.execution.turn_id)
            reload(decision.execution)  # as the run left it, not as it was decided
        reload(self.row)
        return decision.execution

    def pending_approvals(self, *, principal: object = None) -> list[ToolExecution]:
        """The tool calls waiting for a decision that ``principal`` may take: the tree's for a
        run, the turn's own for a turn handle."""
        return approvals.pending_approvals(
            principal=principal, root_id=self.row.root_turn_id,
            turn_id=None if self._approvals_of_tree else self.row.pk)

    def pause(self, *, principal: object = None, cascade: bool = False) -> Self:
        """Pause at the next step boundary (at once when idle); the claim is released."""
        controls.pause(self.row, principal=principal, cascade=cascade)
        reload(self.row)
        return self

    def resume(self, *, principal: object = None, cascade: bool = False) -> Self:
        """Resume a paused turn: a background one is dispatched, an inline one runs now."""
        resumed = controls.resume(self.row, principal=principal, cascade=cascade)
        if self.row.pk in resumed:
            self._continue_inline(self.row.pk)
        reload(self.row)
        return self

    def steer(self, text: str, *, key: str, principal: object = None,
              descendants: bool = False) -> JsonObject:
        """Durable guidance for the current turn, before its next model request; returns
        the receipt (an exact retry returns the same one)."""
        receipt = controls.steer(self.row, text, key=key, principal=principal,
                                 descendants=descendants)
        reload(self.row)
        return receipt

    def events(self, after: int = 0, *, limit: int | None = None,
               principal: object = _UNSET) -> QuerySet[Event]:
        """The tree's durable events with an id greater than ``after`` (the cursor), in order.

        With ``principal=`` the ``read_messages`` action is asked once per conversation of the
        tree first: only the events of the conversations it may read are returned, and when it
        may not read this turn's conversation :class:`AuthorizationError` is raised.
        """
        after = cursor(after, "run.events()")
        limit = optional_count(limit, "run.events(): limit=")
        rows = Event.objects.filter(root_turn_id=self.row.root_turn_id,
                                    id__gt=after).order_by("id")
        if principal is not _UNSET:
            allowed = readable_conversations(self.row.root_turn_id, principal,
                                             required=self.row.conversation_id)
            if allowed is not None:
                rows = rows.filter(conversation_id__in=sorted(allowed))
        # A limit past any count the database takes (a bigint) is no limit at all.
        return rows[:limit] if limit is not None and limit < MAX_LIMIT else rows


class TreeControls(TurnControls):
    """A run's controls: its approvals (decisions and the pending list) span its tree."""

    _approvals_of_tree = True

    def wait(self, timeout: float | None = 60) -> Self:
        """Block until the run is terminal or paused for a person (an approval, a pause) and
        return it refreshed; RunTimeout after ``timeout`` seconds (None: no limit). Holds no
        database session between its checks; refused inside ``transaction.atomic()``."""
        awaiting.wait(self.row, timeout)
        return self

    async def await_result(self, timeout: float | None = 60) -> Self:
        """``wait()`` for async code (async views): ``await run.await_result(timeout=60)``."""
        await awaiting.await_result(self.row, timeout)
        return self

    def stream(self, after: int = 0, *, timeout: float | None = 60) -> Iterator[Any]:
        """The tree's durable events after ``after`` (as ``events()``) and, between them, the
        :class:`~turnkit_django.Delta` chunks of its model calls while they stream (deltas
        travel over ``TURNKIT["DELTA_CHANNEL"]``), in order; ends once the run is terminal or
        paused for a person and everything was handed on; RunTimeout after ``timeout``
        seconds. Holds no database session between its reads."""
        return streaming.stream(self.row, cursor(after, "run.stream()"), timeout)

    def astream(self, after: int = 0, *, timeout: float | None = 60) -> AsyncIterator[Any]:
        """``stream()`` for async code: ``async for item in run.astream(after=cursor)``."""
        return streaming.astream(self.row, cursor(after, "run.astream()"), timeout)

    def retry(self, *, principal: object = _UNSET, submit: bool | None = None) -> Self:
        """Run this failed, cancelled or stale run again: a new run (returned) over a copy of
        its input, with the same agent and options, linked by ``retry_of``. A background run
        is submitted again, an inline one runs now (``submit=`` chooses). With ``principal=``
        the new run is that principal's, once it may read the original (``read_messages``)."""
        row = forks.retry(self.row, self.agent, submit=submit,
                          principal=forks.UNSET if principal is _UNSET else principal)
        retried = copy(self)
        retried.row = row
        return retried


async def in_own_thread(work: Any, *args: Any, **options: Any) -> Any:
    """``work(*args, **options)`` in a thread of its own (not the one Django's sync code shares),
    its connections closed after: an async caller awaits an inline run holding neither the event
    loop nor a database session of its own."""
    return await sync_to_async(unit, thread_sensitive=False)(lambda: work(*args, **options))


class AsyncRuns:
    """``await agent.arun(...)``: ``agent.run(...)`` for async callers (ASGI views)."""

    async def arun(self, task: str, **options: Any) -> Any:
        return await in_own_thread(self.run, task, **options)  # type: ignore[attr-defined]


class ConversationInputs:
    """Idempotent next-turn input and its receipts; ``aask`` for async callers."""

    row: Conversation

    async def aask(self, text: str, **options: Any) -> Any:
        """``await conv.aask(...)``: ``conv.ask(...)`` for async callers (see AsyncRuns)."""
        return await in_own_thread(self.ask, text, **options)  # type: ignore[attr-defined]

    def post(self, text: str, *, key: str, principal: object = None) -> Delivery:
        """Durable input for the next turn, once per ``key``; a running turn never sees it."""
        return inputs.post(self.row, text, key=key, principal=principal)

    def input_status(self, key: str, *, principal: object = _UNSET) -> InputStatus:
        """Whether the input ``key`` (posted or asked) is ``pending`` or ``applied`` (by which
        turn)."""
        return inputs.input_status(self.row, key, principal=None if principal is _UNSET
                                   else principal, check=principal is not _UNSET)

    def fork(self, at: int, *, principal: object = _UNSET) -> Self:
        """A new conversation (returned) holding copies of this one's messages up to and
        including sequence ``at``; this one is unchanged. With ``principal=`` the fork is
        authorized as reading this conversation (``read_messages``) and is that principal's."""
        row = forks.fork(self.row, at,
                         principal=forks.UNSET if principal is _UNSET else principal)
        forked = copy(self)
        forked.row = row
        return forked


__all__ = ["AsyncRuns", "ConversationInputs", "TreeControls", "TurnControls", "in_own_thread"]
