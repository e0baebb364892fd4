"""The ORM store: the only code that writes turnkit rows.

Two locks order every write. The *tree lock* is the root turn's row (``SELECT ... FOR UPDATE``);
claims, fenced writes, budget reservations, cancel and reconcile take it, so each revocation is
linearised with every write it revokes. The *conversation lock* is the conversation's row, taken
by sequence allocation (an ``UPDATE ... RETURNING``). Tree lock first, then conversation.

A worker holds a :class:`Claim` with the fence it got. :meth:`Fenced.atomic` opens a short
transaction, takes the tree lock, re-reads the fence, and raises :class:`LostClaim` when it
changed; nothing inside the block is written then. On SQLite ``select_for_update`` is a no-op and
the IMMEDIATE transaction mode serializes writers instead (system check ``turnkit.E010``).
"""

from __future__ import annotations

import os
import socket
import threading
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import Q
from django.db.models.functions import Now
from django.utils import timezone

from .exceptions import LostClaim
from .messages import Part, dump_parts
from .models import Conversation, Message, ToolExecution, Turn
from .states import ToolStatus, TurnStatus

_incarnation = f"{socket.gethostname()}:{os.getpid()}:{os.urandom(3).hex()}"


def worker_identity(kind: str = "inline") -> str:
    """Return this process incarnation's identity, tagged with the kind of execution."""
    return f"{kind}@{_incarnation}:{threading.get_ident()}"


def now() -> datetime:
    return timezone.now()


# --------------------------------------------------------------------------- locks


def lock_tree(root_id: str) -> dict[str, Any]:
    """Take the tree lock (the root turn's row) and return its ledger fields.

    ``FOR NO KEY UPDATE``: it excludes every other tree-lock holder but not the ``KEY SHARE``
    lock a foreign-key insert takes on the row it references (a wait edge, a delivery or a child
    pointing at a turn of this tree); with ``FOR UPDATE`` such an insert made under another lock
    (the wait-graph lock) deadlocks against a tree-lock holder waiting for that lock.
    """
    row: Any = (
        Turn.objects.select_for_update(no_key=True)
        .filter(pk=root_id)
        .values("fence", "status", "deadline_at", "tree_iterations", "tree_tool_executions",
                "tree_tool_counts", "tree_spend", "options")
        .first()
    )
    if row is None:
        raise Turn.DoesNotExist(f"root turn {root_id!r} does not exist")
    return dict(row)


def allocate_sequences(conversation_id: str, count: int = 1) -> int:
    """Reserve ``count`` message sequences under the conversation lock; return the first."""
    table = Conversation._meta.db_table
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET last_sequence = last_sequence + %s, updated_at = %s "  # noqa: S608
            "WHERE id = %s RETURNING last_sequence",
            [count, now(), conversation_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Conversation.DoesNotExist(f"conversation {conversation_id!r} does not exist")
    return int(row[0]) - count + 1


@dataclass
class NewMessage:
    role: str
    parts: Sequence[Part]
    kind: str = "text"
    turn_id: str | None = None
    tool_execution_id: str | None = None
    metadata: dict[str, Any] | None = None
    fence: int | None = None


def insert_messages(conversation_id: str, messages: Sequence[NewMessage]) -> list[Message]:
    """Append messages with gap-free sequences; the caller holds any tree lock it needs."""
    if not messages:
        return []
    first = allocate_sequences(conversation_id, len(messages))
    rows = [
        Message(
            conversation_id=conversation_id,
            turn_id=m.turn_id,
            sequence=first + i,
            role=m.role,
            kind=m.kind,
            content=dump_parts(m.parts),
            tool_execution_id=m.tool_execution_id,
            metadata=m.metadata or {},
            fence=m.fence,
        )
        for i, m in enumerate(messages)
    ]
    if len(rows) == 1:
        rows[0].save(force_insert=True)
    else:
        Message.objects.bulk_create(rows)
    return rows


def append_user_message(
    conversation_id: str, parts: Sequence[Part], *, metadata: dict[str, Any] | None = None
) -> Message:
    """Append application input (not owned by any claim) to a conversation."""
    with transaction.atomic():
        return insert_messages(
            conversation_id, [NewMessage("user", parts, metadata=metadata)]
        )[0]


# --------------------------------------------------------------------------- claims


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


def _lane_is_free(turn: Turn) -> bool:
    """Serial lane: no other turn of the conversation is busy and this is the oldest submitted.

    One statement, hence one snapshot: with two (busy, then older) a competing claim committing
    between them would be seen as neither pending nor running, and both turns would pass.
    """
    others = Turn.objects.filter(conversation_id=turn.conversation_id).exclude(pk=turn.pk)
    busy = Q(status__in=[TurnStatus.RUNNING, TurnStatus.WAITING, TurnStatus.PAUSED])
    older = Q(status=TurnStatus.PENDING, submitted_at__isnull=False) & (
        Q(submitted_at__lt=turn.submitted_at) | Q(submitted_at=turn.submitted_at, id__lt=turn.id)
    )
    return not others.filter(busy | older).exists()


#: ``prepare(turn, ledger)`` of :func:`claim_turn`: (turn fields, root fields) to write with the
#: claim, decided under the tree lock (the runtime reserves the first model iteration there).
Prepare = Callable[[Turn, dict[str, Any]], tuple[dict[str, Any], dict[str, Any]]]


def claim(turn_id: str, worker: str) -> Claim | None:
    """Claim a pending turn: compare-and-set pending → running, incrementing the fence.

    Returns None when the turn is not claimable (not pending, or its conversation's lane is
    busy). A background turn is claimable only in FIFO order within its conversation.
    """
    claimed = claim_turn(turn_id, worker)
    return None if claimed is None else claimed[0]


def claim_turn(turn_id: str, worker: str, *, root_id: str | None = None,
               prepare: Prepare | None = None) -> tuple[Claim, Turn] | None:
    """:func:`claim`, also returning the claimed row (with its conversation) as it now stands.

    ``root_id`` (when the caller knows it) saves the lookup of the turn's root; ``prepare``
    adds fields to the claim's own write, in the same transaction.
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
        if turn.submitted_at is not None and not _lane_is_free(turn):
            return None
        fields: dict[str, Any] = {
            "status": TurnStatus.RUNNING,
            "fence": turn.fence + 1,
            "claimed_by": worker,
            "started_at": turn.started_at or now(),
        }
        if turn.is_root and turn.deadline_at is None and (turn.options or {}).get("limits"):
            from .budget import Limits

            fields["deadline_at"] = Limits.from_json(turn.options["limits"]).deadline(now())
            ledger["deadline_at"] = fields["deadline_at"]
        root: dict[str, Any] = {}
        if prepare is not None:
            extra, root = prepare(turn, ledger)
            fields.update(extra)
        if turn.is_root:
            fields.update(root)
            root = {}
        Turn.objects.filter(pk=turn_id).update(**fields, heartbeat_at=Now(), updated_at=Now())
        if root:
            Turn.objects.filter(pk=root_id).update(**root)
    for name, value in fields.items():
        if not hasattr(value, "resolve_expression"):  # F() increments stay unread
            setattr(turn, name, value)
    turn.heartbeat_at = turn.updated_at = now()
    return Claim(turn_id, turn.root_turn_id, turn.conversation_id, turn.fence, worker), turn


def heartbeat(claim_: Claim) -> None:
    """Record that the claim's worker is alive; a compare-and-set on the fence."""
    updated = Turn.objects.filter(
        pk=claim_.turn_id, fence=claim_.fence, status=TurnStatus.RUNNING
    ).update(heartbeat_at=Now())
    if not updated:
        raise LostClaim(claim_.turn_id, claim_.fence)


class Fenced:
    """Fenced writes for one claim. Use every method inside :meth:`atomic`."""

    def __init__(self, claim_: Claim) -> None:
        self.claim = claim_

    @contextmanager
    def atomic(self) -> Iterator[dict[str, Any]]:
        """Open a transaction holding the tree lock; raise LostClaim if the fence moved."""
        claim_ = self.claim
        with transaction.atomic():
            ledger = lock_tree(claim_.root_id)
            if claim_.is_root:
                fence, status = ledger["fence"], ledger["status"]
            else:
                row = Turn.objects.filter(pk=claim_.turn_id).values_list("fence", "status").first()
                fence, status = row if row else (None, None)
            if fence != claim_.fence or status != TurnStatus.RUNNING:
                raise LostClaim(claim_.turn_id, claim_.fence)
            yield ledger

    # The methods below assume an open ``atomic()`` block.

    def append(
        self,
        role: str,
        parts: Sequence[Part],
        *,
        kind: str = "text",
        tool_execution_id: str | None = None,
        metadata: dict[str, Any] | None = None,
        conversation_id: str | None = None,
    ) -> Message:
        return self.append_many(
            [NewMessage(role, parts, kind, self.claim.turn_id, tool_execution_id, metadata)],
            conversation_id=conversation_id,
        )[0]

    def append_many(
        self, messages: Iterable[NewMessage], *, conversation_id: str | None = None
    ) -> list[Message]:
        items = []
        for m in messages:
            m.fence = self.claim.fence
            m.turn_id = m.turn_id or self.claim.turn_id
            items.append(m)
        return insert_messages(conversation_id or self.claim.conversation_id, items)

    def update_turn(self, root: dict[str, Any] | None = None, **fields: Any) -> None:
        """Update the claimed turn; ``root`` fields go to the root row, in the same statement
        when the turn is its own root."""
        if root and self.claim.is_root:
            fields, root = {**fields, **root}, None
        Turn.objects.filter(pk=self.claim.turn_id).update(updated_at=Now(), **fields)
        if root:
            self.update_root(**root)

    def update_root(self, **fields: Any) -> None:
        Turn.objects.filter(pk=self.claim.root_id).update(**fields)

    def create_execution(self, **fields: Any) -> ToolExecution:
        execution = ToolExecution(turn_id=self.claim.turn_id, fence=self.claim.fence, **fields)
        execution.save(force_insert=True)
        return execution

    def set_execution(self, execution_id: str, expected: Iterable[str], **fields: Any) -> bool:
        """Compare-and-set a tool execution's status; False if it was not in ``expected``."""
        return bool(
            ToolExecution.objects.filter(pk=execution_id, status__in=list(expected)).update(
                fence=self.claim.fence, updated_at=Now(), **fields
            )
        )


# --------------------------------------------------------------------------- revocation


def record_revocation(turn: Turn, reason: str) -> list[dict[str, Any]]:
    """Return the turn's fence log with the current fence marked revoked at this point.

    The entry records the conversation's last sequence, so the invariant checker can prove that
    no message written under the revoked fence came after the revocation (I4).
    """
    last = (
        Conversation.objects.filter(pk=turn.conversation_id)
        .values_list("last_sequence", flat=True)
        .first()
    )
    log = list(turn.fence_log or [])
    log.append({"fence": turn.fence, "revoked_after_sequence": last, "reason": reason,
                "at": now().isoformat()})
    return log


def revoke(turn: Turn, *, status: str, reason: str, **fields: Any) -> int:
    """Fence out any worker of ``turn`` and move it to ``status``. Caller holds the tree lock."""
    fence = turn.fence + 1
    Turn.objects.filter(pk=turn.pk).update(
        status=status,
        fence=fence,
        claimed_by="",
        fence_log=record_revocation(turn, reason),
        updated_at=Now(),
        **fields,
    )
    return fence


__all__ = [
    "Claim",
    "Fenced",
    "NewMessage",
    "ToolStatus",
    "allocate_sequences",
    "append_user_message",
    "claim",
    "claim_turn",
    "heartbeat",
    "insert_messages",
    "lock_tree",
    "revoke",
    "worker_identity",
]
