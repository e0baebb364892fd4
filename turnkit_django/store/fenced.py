"""Fenced writes: the only way a worker writes to the turn it executes.

:meth:`Fenced.atomic` opens a short transaction, takes the tree lock, re-reads the fence, and
raises :class:`LostClaim` when it changed; nothing inside the block is written then.
:meth:`Fenced.step` sends a step as one statement guarded by the ledger the worker last saw
(:mod:`.steps`), falling back to ``atomic()`` when the guard does not hold. Every owned write
(messages, tool executions, the turn's state and status) is a method of :class:`Fenced`; those
of its tool executions come from :class:`~.execution_writes.ExecutionWrites`.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime, timedelta
from typing import Any, TypeVar, Unpack

from django.db import connection, transaction
from django.db.models import F
from django.db.models.functions import Now

from ..base.serialization import JsonMapping, JsonObject, JsonValue
from ..base.states import TRANSITIONS, TurnStatus
from ..exceptions import LostClaim
from ..messages import MessageKind, Part
from ..models import Conversation, Event, Message, Turn
from . import steps
from .claims import Claim
from .compiled import CompiledUpdate
from .events import TRANSITION_EVENTS, build_event, message_events
from .execution_writes import ExecutionWrites
from .locks import Ledger, LedgerDelta, lock_tree
from .rows import copied
from .steps import StepWrites
from .transcript import NewMessage, build_messages, insert_rows
from .turn_columns import Charge, TerminalFields, TurnFields
from .turn_state import TurnState
from .turns import apply_transition, row_columns

T = TypeVar("T")


#: The fields that end a claim: the fence moves on (no worker holds the new one) and the owner
#: is cleared. Every end of a claim writes them with the status change, in one statement.
def _claim_ended() -> TurnFields:
    return {"fence": F("fence") + 1, "claimed_by": ""}


class Fenced(ExecutionWrites):
    """Fenced writes for one claim: in a :meth:`step`, or inside :meth:`atomic`.

    The claim's worker keeps one per claim: it remembers the tree's ledger as the worker last
    saw it (at the claim and after each of its own writes), which is what lets :meth:`step`
    skip the lock when nobody else wrote to the tree meanwhile.
    """

    def __init__(self, claim: Claim, ledger: Ledger | None = None, *,
                 last_sequence: int | None = None) -> None:
        self.claim = claim
        self._known: Ledger | None = None
        self._known_at = 0.0  # time.monotonic() when the database clock read known.now
        self._writes: StepWrites | None = None
        #: An application control (pause, steer) waits for this worker: the fast path refuses
        #: while it does, and :meth:`atomic` reads it under the lock.
        self.controls_pending = False
        self._events: list[Event] = []  # written at the end of the atomic block
        self._after: list[Callable[[], object]] | None = None  # see after_writes()
        self._then: list[Callable[[], object]] = []  # see hand_off()
        #: The conversation's ``last_sequence`` as the claim read it or this worker's last
        #: buffered step left it (None: not known, or written under the lock since).
        self._last_sequence = last_sequence
        #: The turn's row as this worker's last step, a terminal write, returned it (else None;
        #: only when ``keep_row``: an inline run adopts it, a background worker has no use).
        self.ended: tuple[Any, ...] | None = None
        self.keep_row = False
        #: The transition that ended this worker's claim, committed (None: held, or lost).
        self.ended_by: str | None = None
        if ledger is not None:
            self._remember(ledger, time.monotonic())

    def _remember(self, ledger: Ledger, at: float | None = None) -> None:
        known = copied(ledger, tool_counts=dict(ledger.tool_counts),
                        spend=steps.quantized(ledger.spend))
        if at is None and self._known is not None:  # the clock reading stays the lock's
            known.now, at = self._known.now, self._known_at
        self._known, self._known_at = known, at if at is not None else time.monotonic()

    def _projected(self) -> Ledger | None:
        """The ledger last seen, with the database clock projected to now (never ahead)."""
        known = self._known
        if known is None:
            return None
        elapsed = timedelta(seconds=time.monotonic() - self._known_at)
        return copied(known, tool_counts=dict(known.tool_counts), now=known.now + elapsed)

    def database_now(self) -> datetime | None:
        """The database clock projected from the last lock or claim (None: never read)."""
        ledger = self._projected()
        return None if ledger is None else ledger.now

    @contextmanager
    def atomic(self) -> Iterator[Ledger]:
        """Open a transaction holding the tree lock; raise LostClaim if the fence moved."""
        claim = self.claim
        self._last_sequence, self.ended = None, None
        with transaction.atomic():
            ledger = lock_tree(claim.root_id)
            locked_at = time.monotonic()
            if claim.is_root:
                fence, status, pending = ledger.fence, ledger.status, ledger.controls_pending
            else:
                row = Turn.objects.filter(pk=claim.turn_id).values_list(
                    "fence", "status", "controls_pending").first()
                fence, status, pending = row if row else (-1, "", False)
            self.controls_pending = bool(pending)
            if fence != claim.fence or status != TurnStatus.RUNNING:
                raise LostClaim(claim.turn_id, claim.fence)
            outer, self._events, ended_by = self._events, [], self.ended_by
            try:
                yield ledger
                if self._events:  # the block's events, in order, in one insert
                    Event.objects.bulk_create(self._events)
            except BaseException:
                self.ended_by = ended_by  # rolled back
                raise
            finally:
                self._events = outer
        self._remember(ledger, locked_at)

    def step(self, body: Callable[[Ledger], T], *, buffered: bool = True) -> T:
        """Decide and commit one step: ``body(ledger)`` makes the step's writes and returns.

        On PostgreSQL, with ``buffered``, the body first runs against the ledger this worker
        last saw, its writes buffered and then sent as one statement guarded by the fence and
        that ledger (:mod:`.steps`). When the guard does not hold (someone else wrote to the
        tree, the fence moved, the deadline passed) or the body raises, nothing was written and
        the body runs again inside :meth:`atomic`, writing as it goes. A body must therefore
        keep its effects to its writes and its return value. ``buffered=False`` is for a body
        that uses other store functions (they write at once, under the lock).

        A body that asks for :meth:`after_writes` (a terminal write whose hand-off must commit
        with it) has the statement sent in a transaction, and what it asked for run after it
        in the same one. The statement locks the root's row (the tree lock) and the turn's
        itself, so that runs under the lock without a read to take it.
        """
        ledger = self._projected() if buffered and connection.vendor == "postgresql" else None
        ended_by = self.ended_by
        if ledger is not None:
            writes, after = StepWrites(), list[Callable[[], object]]()
            self._writes, self._after, self._then = writes, after, []
            try:
                result = body(ledger)
            except Exception:  # decided on a view that may be stale: decide again
                result = _UNDECIDED
            finally:
                self._writes, self._after = None, None
            then, self._then = self._then, []
            if result is not _UNDECIDED and (self._send_then(writes, after) if after
                                             else self._send(writes)):
                self._remember(ledger)
                self.ended = writes.returned
                if writes.messages:
                    self._last_sequence = writes.messages[-1].sequence
                for hand_off in then:
                    transaction.on_commit(hand_off)
                return result
            self.ended_by = ended_by  # nothing was written
        with self.atomic() as locked_ledger:
            return body(locked_ledger)

    def _send_then(self, writes: StepWrites, after: list[Callable[[], object]]) -> bool:
        """Send ``writes`` guarded by the ledger last seen and run ``after`` in the same
        transaction; False (rolled back, nothing written) when the guard does not hold."""
        outer, self._events = self._events, []
        try:
            with transaction.atomic():
                if not self._send(writes, savepoint=False):
                    raise _Refused
                for then in after:
                    then()
                if self._events:
                    Event.objects.bulk_create(self._events)
        except _Refused:
            return False
        finally:
            self._events = outer
        return True

    def after_writes(self, then: Callable[[], object]) -> None:
        """Run ``then`` in this transaction once the writes made so far are applied: at once
        inside :meth:`atomic`, after the one statement inside a buffered :meth:`step`."""
        if self._after is None:
            then()
        else:
            self._after.append(then)

    def hand_off(self, locked: Callable[[], object], unlocked: Callable[[], object]) -> None:
        """The writes end a submitted turn, whose lane is handed on.

        Inside :meth:`atomic` (or when this worker does not know the conversation's row as its
        last step left it), ``locked()`` runs now, in the transaction, under the locks the
        writes took: :meth:`after_writes`. In a buffered step, the statement is sent on its
        own, guarded to hold only while no delivery waits in the lane (see
        :func:`.steps.statement`), and ``unlocked()`` runs once it committed, without a lock;
        when the guard does not hold, the step is decided again under the lock, and there
        ``locked()`` runs."""
        writes = self._writes
        if writes is None or self._last_sequence is None:
            self.after_writes(locked)
            return
        writes.lane = self._last_sequence
        self._then.append(unlocked)

    def _send(self, writes: StepWrites, *, savepoint: bool = True) -> bool:
        """Send a step's writes guarded by the ledger last seen (``savepoint`` as for
        :func:`.steps.send`)."""
        claim, known = self.claim, self._known
        if known is None:
            return False
        try:
            return steps.send(claim.turn_id, claim.root_id, claim.conversation_id, claim.fence,
                              known, writes, savepoint=savepoint)
        except steps.Unsupported:
            return False

    # The methods below write at once inside ``atomic()``, or are buffered inside ``step()``.

    def append(self, role: str, parts: Sequence[Part], *, kind: str = MessageKind.TEXT,
               tool_execution_id: str | None = None, metadata: JsonMapping | None = None,
               ) -> Message:
        return self.append_many([NewMessage(role, parts, kind, self.claim.turn_id,
                                            tool_execution_id, metadata)])[0]

    def append_many(self, messages: Iterable[NewMessage]) -> list[Message]:
        items = []
        for m in messages:
            m.fence = self.claim.fence
            m.turn_id = m.turn_id or self.claim.turn_id
            items.append(m)
        rows = build_messages(self.claim.conversation_id, items)
        events = message_events(self.claim.root_id, self.claim.turn_id, rows)
        if self._writes is not None:
            self._writes.messages.extend(rows)
            self._writes.events.extend(events)
            return rows
        self._events.extend(events)
        return insert_rows(self.claim.conversation_id, rows, touch=False)

    def event(self, type_: str, **payload: object) -> None:
        """Write a durable event of this turn with the step."""
        claim = self.claim
        event = build_event(claim.root_id, claim.turn_id, claim.conversation_id, type_, payload)
        if self._writes is not None:
            self._writes.events.append(event)
        else:
            self._events.append(event)

    def record(self, state: TurnState | None = None, *, charge: Charge | None = None,
             delta: LedgerDelta | None = None) -> None:
        """Write the turn's next state (with a response's charge); ``delta`` goes to the root's
        ledger, in the same statement when the turn is its own root."""
        fields: TurnFields = {} if state is None else {"state": state.as_json()}
        if charge is not None:
            fields.update(charge.fields())
        self._write(fields, delta)

    def publish(self, state: TurnState, *, text: str, data: JsonValue,
                charge: Charge | None = None, delta: LedgerDelta | None = None,
                **extra: Unpack[TerminalFields]) -> None:
        """Complete the turn with its output; the claim ends."""
        fields: TurnFields = {"state": state.as_json(), "output_text": text,
                              "output_data": data, "completed_at": Now(), **_claim_ended(),
                              **extra}
        if charge is not None:
            fields.update(charge.fields())
        self._write(fields, delta, transition="publish")

    def fail(self, state: TurnState, *, error: JsonObject,
             **extra: Unpack[TerminalFields]) -> None:
        """Fail the turn with ``error``; the claim ends. Repair its transcript first."""
        self._write({"state": state.as_json(), "error": error, "completed_at": Now(),
                     **_claim_ended(), **extra}, None, transition="fail")

    def suspend(self) -> None:
        """The turn waits for other turns: ``waiting``, claim released (maintenance resumes it)."""
        self._write(_claim_ended(), None, transition="suspend")

    def hand_back(self, not_started: Iterable[str]) -> None:
        """Give the turn back (``pending``, claim released) for another worker to resume; the
        executions in ``not_started`` (intents this worker wrote, calls it never started) go
        back to ``pending`` so the next worker starts them instead of reporting them unknown."""
        for execution_id in not_started:
            self.put_back(execution_id)
        self._write(_claim_ended(), None, transition="hand_back")

    def pause(self, not_started: Iterable[str], controls: JsonMapping, *,
              transition: str = "pause_at_boundary", controls_pending: bool = False) -> None:
        """Acknowledge a pause at a step boundary (or an inline child's stop, ``await_child``):
        ``paused``, claim released, ``controls`` written; unstarted intents back to pending."""
        for execution_id in not_started:
            self.put_back(execution_id)
        self._write({"controls": controls, "controls_pending": controls_pending,
                     **_claim_ended()}, None, transition=transition)
        self.controls_pending = controls_pending

    def await_approval(self, execution_id: str, approval: JsonMapping,
                       controls: JsonMapping) -> None:
        """Park a call until a person decides: the execution back to ``pending`` with its
        approval request, the turn ``paused`` with its claim released."""
        self.put_back(execution_id, approval=approval)
        self._write({"controls": controls, **_claim_ended()}, None, transition="await_approval")

    def settle_controls(self, controls: JsonMapping) -> None:
        """Write the turn's controls with every request handled (the fast path resumes)."""
        self._write({"controls": controls, "controls_pending": False}, None)
        self.controls_pending = False

    def _write(self, fields: TurnFields, delta: LedgerDelta | None, *,
               transition: str | None = None) -> None:
        """The turn's own row (``updated_at`` moves with a status change only, so state
        writes stay HOT updates); ``delta`` goes to the root's ledger."""
        self.ended_by = transition or self.ended_by  # every transition here ends the claim
        if transition in TRANSITION_EVENTS:
            self.event(TRANSITION_EVENTS[transition], status=TRANSITIONS[transition].target)
        writes = self._writes
        if writes is not None:
            if (transition and writes.transition) or writes.turn.keys() & fields.keys():
                raise steps.Unsupported("two writes of one field in a step")
            writes.turn.update(fields)
            writes.transition = transition or writes.transition
            if transition in _TERMINAL:
                writes.touch = True
                writes.returning = row_columns(Turn) if self.keep_row else None
            if delta:
                writes.delta.add(delta)
            return
        root = delta.fields() if delta else {}
        changes: Mapping[str, object] = fields
        if root and self.claim.is_root:
            changes, root = {**fields, **root}, {}
        if transition is None:
            if changes:
                Turn.objects.filter(pk=self.claim.turn_id).update(**changes)
        else:
            apply_transition(self.claim.turn_id, transition, expected_fence=None,
                             updated_at=Now(), **changes)
            if transition in _TERMINAL:
                _TOUCH_CONVERSATION.execute(self.claim.conversation_id)
        if root:
            Turn.objects.filter(pk=self.claim.root_id).update(**root)

    def charge_root(self, delta: LedgerDelta) -> None:
        """Add ``delta`` to the root's ledger (a reservation outside a state write)."""
        if not delta:
            return
        if self._writes is not None:
            self._writes.delta.add(delta)
        else:
            Turn.objects.filter(pk=self.claim.root_id).update(**delta.fields())


_UNDECIDED: Any = object()


class _Refused(Exception):
    """The guard of a step sent in a transaction did not hold: roll the transaction back."""


#: Transitions that end a turn: the conversation's ``updated_at`` (idle since) moves with them.
_TERMINAL = frozenset({"publish", "fail"})
#: The conversation's ``updated_at`` at the end of a turn written under the lock (every turn on
#: SQLite): compiled once per process.
_TOUCH_CONVERSATION = CompiledUpdate(lambda pk: Conversation.objects.filter(pk=pk),
                                     {"updated_at": Now()})


__all__ = ["Charge", "Fenced"]
