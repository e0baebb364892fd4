"""Claims: the write authority a worker gets over one turn, and its heartbeats.

A worker holds a :class:`Claim` with the fence it got (:func:`claim_turn` for a pending turn,
:func:`create_claimed` for an inline run created claimed); its writes go through
:class:`~.fenced.Fenced`. Cancel, reconcile and completion move the fence, so a stale worker can
never write again (P6). What else keeps a pending turn from being claimed (its tenant's limit,
a cascade cancel above it) is :mod:`.admission`, re-exported here.
"""

from __future__ import annotations

import enum
import os
import socket
import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Literal, TypeVar, cast

from django.db import connection, transaction
from django.db.models import Exists, OuterRef, Q
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now
from django.utils import timezone

from ..base.serialization import JsonObject
from ..base.states import TERMINAL_TURN_STATUSES, TurnStatus
from ..exceptions import LostClaim
from ..messages import Part
from ..models import Conversation, Event, Lease, Message, Turn
from .admission import cancelled_above, tenant_full, tenant_limit
from .compiled import CompiledRead
from .events import message_events
from .limits import Limits
from .locks import (
    LEDGER_FIELDS,
    Ledger,
    LedgerDelta,
    LedgerRow,
    database_now,
    lock_tree,
    lock_tree_of,
    read_ledger,
)
from .transcript import TAIL, NewMessage, build_messages, insert_rows, visible_tail
from .turn_columns import TurnFields
from .turn_state import TurnState
from .turn_statements import claim_write, insert_claimed
from .turns import TURN_FIELDS as _TURN_FIELDS
from .turns import NewTurn, apply_transition, build_turn, refuse_transition

T = TypeVar("T")

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


#: ``prepare(turn, ledger)`` of :func:`claim_turn`: the state and the root ledger changes to
#: write with the claim, decided under the tree lock (the runtime reserves the first iteration).
Prepare = Callable[[Turn, Ledger], tuple[TurnState | None, LedgerDelta]]


def claim(turn_id: str, worker: str) -> Claim | None:
    """Claim a pending turn (see :func:`claim_turn`); None when it is not claimable."""
    claimed = claim_turn(turn_id, worker)
    return None if claimed is None else claimed[0]


def claim_turn(turn_id: str, worker: str, *, root_id: str | None = None,
               prepare: Prepare | None = None) -> tuple[Claim, Turn, Ledger] | None:
    """Claim a pending turn: compare-and-set pending → running, incrementing the fence.

    Returns the claim, the row (with its conversation) as it now stands and the tree's ledger
    as the claim left it, or None when the
    turn is not claimable (not pending, or its conversation's lane is busy: a background turn is
    claimable only in FIFO order within its conversation). ``root_id`` (when the caller knows
    it) is checked against the turn's; without it the tree is found with its lock.
    ``prepare`` adds to the claim's own write.
    """
    if connection.vendor == "postgresql" and root_id in (None, turn_id):
        claimed = _claim_as_read(turn_id, worker, prepare, root_id)
        if claimed is not _UNDECIDED:
            return claimed
    with transaction.atomic():
        ledger = lock_tree(root_id) if root_id is not None else lock_tree_of(turn_id)
        if ledger is None:
            return None
        root_id = ledger.root_id
        # The lane's state is read with the row, in one snapshot: read apart (busy, then
        # older), a competing claim committing between them would be seen as neither
        # pending nor running.
        found = _CLAIMABLE.rows(turn_id)
        if not found:
            return None
        turn, lane_blocked = _claimable(found[0])
        if turn.status != TurnStatus.PENDING or turn.root_turn_id != root_id:
            return None
        if turn.submitted_at is not None and lane_blocked:
            return None
        if cancelled_above(turn) or tenant_full(turn):
            return None
        fields, delta, lease = _claim_fields(turn, ledger, worker, prepare)
        if connection.vendor == "postgresql":  # one statement
            root_fields = delta.fields() if not turn.is_root else {}
            if not claim_write(turn.pk, root_id, fields, root_fields, lease):
                refuse_transition(turn.pk, "claim")
        else:
            if not turn.is_root and delta:
                Turn.objects.filter(pk=root_id).update(**delta.fields())
            apply_transition(turn.pk, "claim", updated_at=Now(), **fields)
            Lease.objects.bulk_create(
                [lease], update_conflicts=True, unique_fields=["turn"],
                update_fields=["fence", "worker", "heartbeat_at", "waiting_on", "waiting_since"])
    return _claimed(turn, fields, ledger, worker)


class _Undecided(enum.Enum):
    UNDECIDED = "decide under the lock"


_UNDECIDED = _Undecided.UNDECIDED


def _claim_as_read(turn_id: str, worker: str, prepare: Prepare | None, root_id: str | None,
                   ) -> tuple[Claim, Turn, Ledger] | Literal[_Undecided.UNDECIDED] | None:
    """:func:`claim_turn` decided on the row as one read (PostgreSQL, autocommit) finds it, and
    written only if the row is still that version (its ``xmin``): whatever changed it meanwhile
    (a cancel, a control, another claim) makes the write match nothing.

    A root turn holds its own ledger, so its claim takes no lock: two statements. A child's
    ledger is its root's: it is read apart, and the write locks the root's row first and holds
    only if that ledger is unchanged too: three statements, none of them in a transaction.

    None, as the lock would answer, for a turn that can never be claimed now: missing,
    finished (no transition leaves a terminal status), or behind another turn of its lane
    (which rings it when it ends). :data:`_UNDECIDED` when the write did not hold or the turn
    is in another status: the caller claims under the lock, which decides again. A
    ``root_id`` the turn does not have is the lock's to answer too.
    """
    found = _CLAIMABLE_ROOT.rows(turn_id)
    if not found or (root_id is not None and found[0][_ROOT_AT] != root_id):
        return None if root_id is None else _UNDECIDED
    *row, now, version, tail = found[0]
    turn, lane_blocked = _claimable(tuple(row))
    vars(turn)[TAIL] = tail or []
    if turn.status in TERMINAL_TURN_STATUSES:
        return None
    if turn.status != TurnStatus.PENDING:
        return _UNDECIDED
    if turn.submitted_at is not None and lane_blocked:
        return None
    if tenant_limit(turn) is not None:  # counted under the tenant lock
        return _UNDECIDED
    ledger: Ledger | None
    if turn.is_root:
        ledger = Ledger.from_row(turn.pk, cast(LedgerRow, {
            **{name: getattr(turn, name) for name in LEDGER_FIELDS}, "db_now": now}))
    else:  # its ledger is its root's: read apart, and guarded in the write
        read = read_ledger(turn.root_turn_id)
        if read is None:
            return _UNDECIDED
        ledger, marked = read
        if marked and cancelled_above(turn):
            return None
    try:
        fields, delta, lease = _claim_fields(turn, ledger, worker, prepare)
    except Exception:  # decided on a row that may be stale: decide again under the lock
        return _UNDECIDED
    if not claim_write(turn.pk, ledger.root_id, fields,
                       {} if turn.is_root else delta.fields(), lease, version=str(version),
                       known=None if turn.is_root else ledger):
        return _UNDECIDED
    return _claimed(turn, fields, ledger, worker)


def _claim_fields(turn: Turn, ledger: Ledger, worker: str, prepare: Prepare | None,
                  ) -> tuple[TurnFields, LedgerDelta, Lease]:
    """What a claim of ``turn`` writes, decided against ``ledger``: the turn's fields (with
    the root's ledger changes when it is the root), the root's delta, and the lease."""
    fields: TurnFields = {"fence": turn.fence + 1, "claimed_by": worker,
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
    lease = Lease(turn_id=turn.pk, fence=fields["fence"], worker=worker,
                  heartbeat_at=ledger.now)
    if turn.is_root:
        fields.update(delta.fields())
    return fields, delta, lease


def _claimed(turn: Turn, fields: TurnFields, ledger: Ledger,
             worker: str) -> tuple[Claim, Turn, Ledger]:
    """The claim, the row and the ledger once a claim's write of ``fields`` committed."""
    for name, value in fields.items():
        if not hasattr(value, "resolve_expression"):  # F() increments stay unread
            setattr(turn, name, value)
    turn.status = TurnStatus.RUNNING
    turn.updated_at = ledger.now
    if turn.is_root:  # the ledger as the claim's own write left it
        ledger.fence, ledger.status = turn.fence, turn.status
    return Claim(turn.pk, turn.root_turn_id, turn.conversation_id, turn.fence, worker), turn, ledger


_CONVERSATION_FIELDS = tuple(f.attname for f in Conversation._meta.concrete_fields)
#: The row a claim reads, with its conversation and its lane's state, compiled once per
#: process (:mod:`.compiled`).
_CLAIMABLE = CompiledRead(lambda turn_id: Turn.objects.with_lane_blocked().filter(
    pk=turn_id).values_list(*_TURN_FIELDS, *(f"conversation__{f}" for f in _CONVERSATION_FIELDS),
                            "lane_busy", "lane_older"), 1)


def _read_to_claim(turn_id: str) -> Any:
    """:data:`_CLAIMABLE` with the database's clock and the row's version, for a claim made
    without the lock."""
    version = RawSQL(f"{connection.ops.quote_name(Turn._meta.db_table)}.xmin::text",  # noqa: S611
                     ())  # (an identifier only)
    return Turn.objects.with_lane_blocked().filter(pk=turn_id).annotate(
        db_now=Now(), version=version, tail=visible_tail()).values_list(
        *_TURN_FIELDS, *(f"conversation__{f}" for f in _CONVERSATION_FIELDS), "lane_busy",
        "lane_older", "db_now", "version", "tail")


_CLAIMABLE_ROOT = CompiledRead(_read_to_claim, 1)
_ROOT_AT = _TURN_FIELDS.index("root_turn_id")


def _claimable(row: tuple[Any, ...]) -> tuple[Turn, bool]:
    """The turn (with its conversation) and whether its lane blocks it, from a claim's read."""
    split = len(_TURN_FIELDS)
    turn = Turn.from_db("default", _TURN_FIELDS, row[:split])
    turn.conversation = Conversation.from_db(
        "default", _CONVERSATION_FIELDS, row[split:split + len(_CONVERSATION_FIELDS)])
    return turn, bool(row[-2] or row[-1])


def create_claimed(spec: NewTurn, conversation: Conversation, parts: Sequence[Part],
                   worker: str, *, prepare: Prepare | None = None,
                   message_metadata: JsonObject | None = None,
                   message_key: str | None = None,
                   ) -> tuple[Claim, Turn, Ledger, Message | None]:
    """Create a root turn already claimed by ``worker``: an inline run.

    No other worker can claim a turn that does not exist yet, so the turn is written with its
    claim, its lease, its input message and (when ``conversation`` is unsaved) its conversation,
    in one transaction: one statement on PostgreSQL. Returns the claim, the row, the tree's
    ledger as the claim left it, and the input message. ``prepare`` as for :func:`claim_turn`.
    """
    if spec.parent is not None or spec.tree is not None:
        raise ValueError("only a root turn can be created claimed")
    message = None
    if parts:
        message = build_messages(conversation.pk, [NewMessage("user", parts,
                                                              metadata=message_metadata,
                                                              key=message_key)])[0]
    turn = build_turn(spec, conversation, 0)  # its input sequence is allocated below
    raw = (turn.options or {}).get("limits")
    limits = None if raw is None else Limits.from_json(raw)
    lifetime = None if limits is None else limits.lifetime
    # For a new tree the clock only matters through its lifetime: the deadline and the checks
    # are decided relative to a provisional "now", then set from the database's clock.
    start = timezone.now()
    ledger = Ledger(turn.pk, 0, TurnStatus.PENDING, None if lifetime is None else start + lifetime,
                    0, 0, {}, Decimal(0), limits, start, raw)
    delta = LedgerDelta()
    if prepare is not None:
        state, delta = prepare(turn, ledger)
        if state is not None:
            turn.state = state.as_json()
    turn.status, turn.fence, turn.claimed_by = TurnStatus.RUNNING, 1, worker
    turn.tree_iterations, turn.tree_tool_executions = delta.iterations, delta.tool_executions
    turn.tree_tool_counts, turn.tree_spend = dict(delta.tool_counts or {}), delta.spend
    lease = Lease(turn_id=turn.pk, fence=1, worker=worker, heartbeat_at=start)
    events = [] if message is None else message_events(turn.pk, turn.pk, [message])
    if connection.vendor == "postgresql":
        now, sequence = insert_claimed(conversation, message, turn, lease, lifetime, events)
    else:
        with transaction.atomic():
            if conversation._state.adding:
                conversation.save(force_insert=True)
            now = database_now()
            if message is not None:
                sequence = insert_rows(conversation.pk, [message])[0].sequence
            else:
                sequence = Conversation.objects.filter(pk=conversation.pk).values_list(
                    "last_sequence", flat=True).get()
            turn.context_sequence, turn.started_at = sequence, now
            turn.deadline_at = None if lifetime is None else now + lifetime
            turn.save(force_insert=True)
            lease.heartbeat_at = now
            lease.save(force_insert=True)
            Event.objects.bulk_create(events)
    if message is not None:
        message.sequence = sequence
    turn.context_sequence, turn.started_at, turn.updated_at = sequence, now, now
    turn.deadline_at = None if lifetime is None else now + lifetime
    ledger.fence, ledger.status, ledger.now = 1, TurnStatus.RUNNING, now
    ledger.deadline_at = turn.deadline_at
    return Claim(turn.pk, turn.pk, conversation.pk, 1, worker), turn, ledger, message


def heartbeat(claim: Claim) -> None:
    """Record that the claim's worker is alive, on its lease (never on the turn's row, so it
    never waits for a lock); raise LostClaim once the turn's fence has moved on."""
    holds = Turn.objects.filter(pk=claim.turn_id, fence=claim.fence).running()
    updated = Lease.objects.filter(turn_id=claim.turn_id, fence=claim.fence).filter(
        Exists(holds)).update(heartbeat_at=Now())
    if not updated:
        raise LostClaim(claim.turn_id, claim.fence)


def heartbeat_all(claims: Sequence[Claim]) -> set[str]:
    """:func:`heartbeat` for every claim a process holds, in one statement; return the turn
    ids whose claim is lost (their fence moved on: read again only when some were)."""
    if not claims:
        return set()
    held = Q()
    for claim in claims:
        held |= Q(turn_id=claim.turn_id, fence=claim.fence)
    holds = Turn.objects.filter(pk=OuterRef("turn_id"), fence=OuterRef("fence")).running()
    updated = Lease.objects.filter(held).filter(Exists(holds)).update(heartbeat_at=Now())
    if updated == len({(c.turn_id, c.fence) for c in claims}):
        return set()
    alive = set(Turn.objects.filter(pk__in=[c.turn_id for c in claims]).running().values_list(
        "pk", "fence"))
    return {c.turn_id for c in claims if (c.turn_id, c.fence) not in alive}


def lease_of(turn_id: str) -> datetime | None:
    """The last heartbeat of the claim on ``turn_id`` (None: never claimed)."""
    return Lease.objects.filter(turn_id=turn_id).values_list("heartbeat_at", flat=True).first()


__all__ = ["Claim", "Prepare", "cancelled_above", "claim", "claim_turn", "create_claimed",
           "heartbeat", "heartbeat_all", "lease_of", "tenant_full", "tenant_limit",
           "worker_identity"]
