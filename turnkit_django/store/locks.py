"""The locks that order every write, and the tree ledger read under the tree lock.

The *tree lock* is the root turn's row (``SELECT ... FOR NO KEY UPDATE``): claims, fenced writes,
budget reservations, cancel and reconcile take it, so each revocation is linearised with every
write it revokes. The *conversation lock* is the conversation's row, taken by sequence
allocation (an ``UPDATE ... RETURNING``) and by delivery. The *graph lock* serializes wait-edge
inserts. The *tenant lock* serializes the claims of one tenant's turns. Order: tree, tenant,
graph, conversation. On SQLite ``select_for_update`` is a no-op and the
IMMEDIATE transaction mode serializes writers instead (system check ``turnkit.E010``).
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any, TypedDict, cast

from django.db import connection
from django.db.models import Exists, F, OuterRef, Subquery
from django.db.models.functions import Now
from django.utils import timezone

from ..base.serialization import JsonObject, JsonValue
from ..base.states import TurnStatus
from ..exceptions import ConfigurationError
from ..models import Conversation, Turn
from .compiled import CompiledRead
from .limits import Limits
from .turn_columns import TurnFields

#: The advisory lock key of the wait graph (one key for the whole database).
GRAPH_LOCK_KEY = zlib.crc32(b"turnkit.wait_graph")
#: The seed of the tenant locks' keys (the tenant's hash), apart from other advisory locks.
TENANT_LOCK_SEED = zlib.crc32(b"turnkit.tenant")

LEDGER_FIELDS = ("fence", "status", "deadline_at", "tree_iterations", "tree_tool_executions",
                 "tree_tool_counts", "tree_spend", "options", "controls_pending")


class LedgerRow(TypedDict):
    """The root's row as :func:`lock_tree` reads it (its ledger columns and the clock)."""

    fence: int
    status: str
    deadline_at: datetime | None
    tree_iterations: int
    tree_tool_executions: int
    tree_tool_counts: dict[str, int] | None
    tree_spend: Decimal
    options: JsonObject | None
    controls_pending: bool
    db_now: datetime


@dataclass
class Ledger:
    """The tree's budget ledger, as the root row holds it while the tree lock is held.

    A working copy: a transaction that reserves several things updates it in place so that a
    later check in the same transaction sees the earlier reservation.
    """

    root_id: str
    fence: int
    status: str
    deadline_at: datetime | None
    iterations: int
    tool_executions: int
    tool_counts: dict[str, int]
    spend: Decimal
    limits: Limits | None
    #: The database's clock when the lock was taken: every deadline is compared with it.
    now: datetime
    #: ``limits`` as the root's options store them (the fast path's guard compares it).
    limits_json: JsonValue = None
    #: The root's own flag: an application control waits for its worker.
    controls_pending: bool = False

    @classmethod
    def from_row(cls, root_id: str, row: LedgerRow) -> Ledger:
        raw = (row["options"] or {}).get("limits")
        if raw is not None and not isinstance(raw, dict):
            raise ConfigurationError(f"turn {root_id!r}: its stored limits must be a JSON "
                                     f"object, got {raw!r}")
        return cls(root_id, int(row["fence"]), str(row["status"]), row["deadline_at"],
                   int(row["tree_iterations"]), int(row["tree_tool_executions"]),
                   {str(k): int(v) for k, v in (row["tree_tool_counts"] or {}).items()},
                   Decimal(row["tree_spend"]),
                   None if raw is None else Limits.from_json(raw),
                   row["db_now"], raw, bool(row.get("controls_pending")))


@dataclass
class LedgerDelta:
    """Changes to write to the root's ledger, accumulated by one transaction."""

    iterations: int = 0
    tool_executions: int = 0
    tool_counts: dict[str, int] | None = None
    spend: Decimal = field(default_factory=Decimal)

    def __bool__(self) -> bool:
        return bool(self.iterations or self.tool_executions or self.tool_counts is not None
                    or self.spend)

    def add(self, other: LedgerDelta) -> None:
        self.iterations += other.iterations
        self.tool_executions += other.tool_executions
        if other.tool_counts is not None:
            self.tool_counts = other.tool_counts
        self.spend += other.spend

    def fields(self) -> TurnFields:
        """The root row's fields (relative updates, so concurrent deltas add up)."""
        out: TurnFields = {}
        if self.iterations:
            out["tree_iterations"] = F("tree_iterations") + self.iterations
        if self.tool_executions:
            out["tree_tool_executions"] = F("tree_tool_executions") + self.tool_executions
        if self.tool_counts is not None:
            out["tree_tool_counts"] = self.tool_counts
        if self.spend:
            out["tree_spend"] = F("tree_spend") + self.spend
        return out


def lock_tree(root_id: str) -> Ledger:
    """Take the tree lock (the root turn's row) and return its ledger.

    ``FOR NO KEY UPDATE``: it excludes every other tree-lock holder but not the ``KEY SHARE``
    lock a foreign-key insert takes on the row it references (a wait edge, a delivery or a child
    pointing at a turn of this tree); with ``FOR UPDATE`` such an insert made under another lock
    (the wait-graph lock) deadlocks against a tree-lock holder waiting for that lock.
    """
    found = _LOCK_TREE.rows(root_id)
    if not found:
        raise Turn.DoesNotExist(f"root turn {root_id!r} does not exist")
    return _ledger(root_id, found[0])


def lock_tree_of(turn_id: str) -> Ledger | None:
    """:func:`lock_tree` for the tree ``turn_id`` belongs to, found in the same statement;
    None when there is no such turn."""
    found = _LOCK_TREE_OF.rows(turn_id)
    if not found:
        return None
    root_id, *values = found[0]
    return _ledger(root_id, values)


def read_ledger(root_id: str) -> tuple[Ledger, bool] | None:
    """The tree's ledger as a read without the lock finds it (None: no such turn), and whether
    a turn of the tree was cancelled with its descendants (a cascade mark: a child's claim
    then looks further, :func:`.admission.cancelled_above`). Only for a write that holds only
    while the root's row still has that ledger (:func:`.turn_statements.claim_write`)."""
    found = _LEDGER.rows(root_id)
    if not found:
        return None
    *values, marked = found[0]
    return _ledger(root_id, values), bool(marked)


def _ledger(root_id: str, values: Sequence[Any]) -> Ledger:
    """The ledger from a read of :data:`_COLUMNS` (the columns as the ORM converted them)."""
    return Ledger.from_row(root_id, cast(LedgerRow, dict(zip(_COLUMNS, values, strict=True))))


_COLUMNS = (*LEDGER_FIELDS, "db_now")
#: The ledger reads are compiled once per process (:mod:`.compiled`): every step under the lock pays
#: the round trip, not the ORM's query building.
_LOCK_TREE = CompiledRead(lambda root_id: Turn.objects.select_for_update(no_key=True).filter(
    pk=root_id).annotate(db_now=Now()).values_list(*_COLUMNS), 1)
_LEDGER = CompiledRead(lambda root_id: Turn.objects.filter(pk=root_id).annotate(
    db_now=Now(), cascade_marked=Exists(Turn.objects.filter(
        root_turn_id=OuterRef("pk"), status=TurnStatus.CANCELLED, options__cancel_cascade=True,
    ))).values_list(*_COLUMNS, "cascade_marked"), 1)
_LOCK_TREE_OF = CompiledRead(lambda turn_id: Turn.objects.select_for_update(no_key=True).filter(
    pk=Subquery(Turn.objects.filter(pk=turn_id).values("root_turn_id")[:1])).annotate(
    db_now=Now()).values_list("pk", *_COLUMNS), 1)


def lock_conversation(conversation_id: str) -> Conversation:
    """The conversation lock; ``NO KEY``: it serializes with sequence allocation (an UPDATE of
    the row) but does not block inserts of rows that merely reference the conversation."""
    return Conversation.objects.select_for_update(no_key=True).get(pk=conversation_id)


def graph_lock() -> None:
    """Take the wait-graph lock until the current transaction ends."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [GRAPH_LOCK_KEY])
    elif connection.vendor != "sqlite":
        raise ConfigurationError(
            f"wait edges need PostgreSQL or SQLite (IMMEDIATE mode); {connection.vendor!r} "
            "has no lock turnkit can use for the wait graph"
        )


def lock_tenant(tenant: str) -> None:
    """Take the tenant lock of ``tenant`` until the current transaction ends: the claims of
    its turns (``TENANT_LIMITS``) count its running turns and write theirs one at a time. An
    advisory lock (PostgreSQL) keyed by the tenant; on SQLite the IMMEDIATE transaction the
    claim runs in serializes it already."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtextextended(%s, %s))",
                           [tenant, TENANT_LOCK_SEED])


def database_now() -> datetime:
    """Return the database server's current time (the clock heartbeats are stamped with)."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            value: datetime = cursor.fetchone()[0]
            return value
    return timezone.now()  # SQLite runs in this process: its clock is ours


__all__ = ["GRAPH_LOCK_KEY", "LEDGER_FIELDS", "Ledger", "LedgerDelta", "database_now", "graph_lock",
           "lock_conversation", "lock_tenant", "lock_tree", "lock_tree_of", "read_ledger"]
