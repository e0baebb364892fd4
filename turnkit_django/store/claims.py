"""Claims and fenced writes: the only way a worker writes to the turn it executes.

A worker holds a :class:`Claim` with the fence it got. :meth:`Fenced.atomic` opens a short
transaction, takes the tree lock, re-reads the fence, and raises :class:`LostClaim` when it
changed; nothing inside the block is written then. Every owned write (messages, tool
executions, the turn's state, its terminal status) is a method of :class:`Fenced`, used inside
that block. Cancel, reconcile and completion move the fence, so a stale worker can never write
again (P6).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.db import transaction
from django.db.models import Exists, F
from django.db.models.functions import Now

from ..exceptions import LostClaim
from ..messages import MessageKind, Part, ToolCallPart
from ..models import Lease, Message, ToolExecution, Turn
from ..states import ToolStatus, TurnStatus
from .locks import Ledger, LedgerDelta, lock_tree
from .state import TurnState
from .transcript import NewMessage, insert_messages
from .turns import apply_transition

_incarnation = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def worker_identity(kind: str = "inline") -> str:
    """Return this process incarnation's identity, tagged with the kind of execution."""
    return f"{kind}@{_incarnation}:{threading.get_ident()}"


@dataclass(frozen=True)
class Claim:
    """Write authority over one turn, valid while the turn's fence equals ``fence``."""

    turn_id: str
    root_id: str
    conversation_id: str
    fence: int
    worker: str

    @property
    def is_root(self) -> bool:
        return self.turn_id == self.root_id


@dataclass(frozen=True)
class Charge:
    """What a model response costs the turn: its new usage total and its cost (None: unknown)."""

    usage: dict[str, Any]
    cost: Decimal | None

    def fields(self) -> dict[str, Any]:
        fields: dict[str, Any] = {"usage": self.usage}
        if self.cost is None:
            fields["cost_unknown"] = True
        else:
            fields["cost"] = F("cost") + self.cost
        return fields


#: ``prepare(turn, ledger)`` of :func:`claim_turn`: the state and the root ledger changes to
#: write with the claim, decided under the tree lock (the runtime reserves the first iteration).
Prepare = Callable[[Turn, Ledger], tuple[TurnState | None, LedgerDelta]]


def claim(turn_id: str, worker: str) -> Claim | None:
    """Claim a pending turn (see :func:`claim_turn`); None when it is not claimable."""
    claimed = claim_turn(turn_id, worker)
    return None if claimed is None else claimed[0]


def claim_turn(turn_id: str, worker: str, *, root_id: str | None = None,
               prepare: Prepare | None = None) -> tuple[Claim, Turn] | None:
    """Claim a pending turn: compare-and-set pending → running, incrementing the fence.

    Returns the claim and the row (with its conversation) as it now stands, or None when the
    turn is not claimable (not pending, or its conversation's lane is busy: a background turn is
    claimable only in FIFO order within its conversation). ``root_id`` (when the caller knows
    it) saves the lookup of the turn's root; ``prepare`` adds to the claim's own write.
    """
    if root_id is None:
        root_id = Turn.objects.filter(pk=turn_id).values_list("root_turn_id", flat=True).first()
        if root_id is None:
            return None
    with transaction.atomic():
        ledger = lock_tree(root_id)
        turn = Turn.objects.select_related("conversation").filter(pk=turn_id).first()
        if turn is None or turn.status != TurnStatus.PENDING or turn.root_turn_id != root_id:
            return None
        # One statement, hence one snapshot: with two (busy, then older) a competing claim
        # committing between them would be seen as neither pending nor running.
        if turn.submitted_at is not None and Turn.objects.blocking_lane_of(turn).exists():
            return None
        fields: dict[str, Any] = {"fence": turn.fence + 1, "claimed_by": worker,
                                  "started_at": turn.started_at or ledger.now}
        if turn.is_root and turn.deadline_at is None and ledger.limits is not None \
                and ledger.limits.lifetime is not None:
            fields["deadline_at"] = ledger.now + ledger.limits.lifetime
            ledger.deadline_at = fields["deadline_at"]
        delta = LedgerDelta()
        if prepare is not None:
            state, delta = prepare(turn, ledger)
            if state is not None:
                fields["state"] = state.as_json()
        if turn.is_root:
            fields.update(delta.fields())
        elif delta:
            Turn.objects.filter(pk=root_id).update(**delta.fields())
        apply_transition(turn.pk, "claim", updated_at=Now(), **fields)
        Lease.objects.bulk_create(
            [Lease(turn_id=turn.pk, fence=fields["fence"], worker=worker,
                   heartbeat_at=ledger.now)],
            update_conflicts=True, unique_fields=["turn"],
            update_fields=["fence", "worker", "heartbeat_at"])
    for name, value in fields.items():
        if not hasattr(value, "resolve_expression"):  # F() increments stay unread
            setattr(turn, name, value)
    turn.status = TurnStatus.RUNNING
    turn.updated_at = ledger.now
    return Claim(turn_id, turn.root_turn_id, turn.conversation_id, turn.fence, worker), turn


def heartbeat(claim: Claim) -> None:
    """Record that the claim's worker is alive, on its lease (never on the turn's row, so it
    never waits for a lock); raise LostClaim once the turn's fence has moved on."""
    holds = Turn.objects.filter(pk=claim.turn_id, fence=claim.fence).running()
    updated = Lease.objects.filter(turn_id=claim.turn_id, fence=claim.fence).filter(
        Exists(holds)).update(heartbeat_at=Now())
    if not updated:
        raise LostClaim(claim.turn_id, claim.fence)


def lease_of(turn_id: str) -> datetime | None:
    """The last heartbeat of the claim on ``turn_id`` (None: never claimed)."""
    return Lease.objects.filter(turn_id=turn_id).values_list("heartbeat_at", flat=True).first()


#: The fields that end a claim: the fence moves on (no worker holds the new one) and the owner
#: is cleared. Every end of a claim writes them with the status change, in one statement.
def _claim_ended() -> dict[str, Any]:
    return {"fence": F("fence") + 1, "claimed_by": ""}


class Fenced:
    """Fenced writes for one claim. Use every method inside :meth:`atomic`."""

    def __init__(self, claim: Claim) -> None:
        self.claim = claim

    @contextmanager
    def atomic(self) -> Iterator[Ledger]:
        """Open a transaction holding the tree lock; raise LostClaim if the fence moved."""
        claim = self.claim
        with transaction.atomic():
            ledger = lock_tree(claim.root_id)
            if claim.is_root:
                fence, status = ledger.fence, ledger.status
            else:
                row = Turn.objects.filter(pk=claim.turn_id).values_list("fence", "status").first()
                fence, status = row if row else (-1, "")
            if fence != claim.fence or status != TurnStatus.RUNNING:
                raise LostClaim(claim.turn_id, claim.fence)
            yield ledger

    # The methods below assume an open ``atomic()`` block.

    def append(self, role: str, parts: Sequence[Part], *, kind: str = MessageKind.TEXT,
               tool_execution_id: str | None = None, metadata: dict[str, Any] | None = None,
               ) -> Message:
        return self.append_many([NewMessage(role, parts, kind, self.claim.turn_id,
                                            tool_execution_id, metadata)])[0]

    def append_many(self, messages: Iterable[NewMessage]) -> list[Message]:
        items = []
        for m in messages:
            m.fence = self.claim.fence
            m.turn_id = m.turn_id or self.claim.turn_id
            items.append(m)
        return insert_messages(self.claim.conversation_id, items)

    def record(self, state: TurnState | None = None, *, charge: Charge | None = None,
             delta: LedgerDelta | None = None) -> None:
        """Write the turn's next state (with a response's charge); ``delta`` goes to the root's
        ledger, in the same statement when the turn is its own root."""
        fields: dict[str, Any] = {} if state is None else {"state": state.as_json()}
        if charge is not None:
            fields.update(charge.fields())
        self._write(fields, delta)

    def publish(self, state: TurnState, *, text: str, data: Any, charge: Charge | None = None,
                delta: LedgerDelta | None = None, **extra: Any) -> None:
        """Complete the turn with its output; the claim ends."""
        fields = {"state": state.as_json(), "output_text": text, "output_data": data,
                  "completed_at": Now(), **_claim_ended(), **extra}
        if charge is not None:
            fields.update(charge.fields())
        self._write(fields, delta, transition="publish")

    def fail(self, state: TurnState, *, error: dict[str, Any], **extra: Any) -> None:
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
            self.move_execution(execution_id, [ToolStatus.RUNNING], ToolStatus.PENDING)
        self._write(_claim_ended(), None, transition="hand_back")

    def _write(self, fields: dict[str, Any], delta: LedgerDelta | None, *,
               transition: str | None = None) -> None:
        root = delta.fields() if delta else {}
        if root and self.claim.is_root:
            fields, root = {**fields, **root}, {}
        if transition is None:
            Turn.objects.filter(pk=self.claim.turn_id).update(updated_at=Now(), **fields)
        else:
            apply_transition(self.claim.turn_id, transition, updated_at=Now(), **fields)
        if root:
            Turn.objects.filter(pk=self.claim.root_id).update(**root)

    def charge_root(self, delta: LedgerDelta) -> None:
        """Add ``delta`` to the root's ledger (a reservation outside a state write)."""
        if delta:
            Turn.objects.filter(pk=self.claim.root_id).update(**delta.fields())

    # -- tool executions ----------------------------------------------------------------

    def open_execution(self, call: ToolCallPart, status: str, **fields: Any) -> ToolExecution:
        """Create the execution row of ``call`` (the intent, or a result decided at once)."""
        execution = ToolExecution(turn_id=self.claim.turn_id, fence=self.claim.fence,
                                  tool_call_id=call.id, tool_name=call.name,
                                  arguments=call.arguments, status=status, **fields)
        execution.save(force_insert=True)
        return execution

    def move_execution(self, execution_id: str, expected: Iterable[str], status: str,
                       **fields: Any) -> bool:
        """Compare-and-set a tool execution's status; False if it was not in ``expected``."""
        return bool(ToolExecution.objects.filter(pk=execution_id, status__in=list(expected))
                    .update(status=status, fence=self.claim.fence, updated_at=Now(), **fields))

    def restart_execution(self, execution_id: str) -> bool:
        """Start a pending execution again (a replay-safe call reset by recovery, a wait)."""
        return self.move_execution(execution_id, [ToolStatus.PENDING, ToolStatus.RUNNING],
                                   ToolStatus.RUNNING, started_at=Now(),
                                   attempts=F("attempts") + 1)


__all__ = ["Charge", "Claim", "Fenced", "Prepare", "claim", "claim_turn", "heartbeat", "lease_of",
           "worker_identity"]
