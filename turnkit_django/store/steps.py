"""One fenced step as one statement: the fast path of :meth:`Fenced.step` on PostgreSQL.

A step's writes (the turn's state and status, the root's ledger, messages with their sequences,
tool executions created or moved) are buffered in :class:`StepWrites` while the runtime decides
the step against the ledger the worker last saw, then sent as one data-modifying statement:

* the turn's ``UPDATE`` comes first and carries the guard: the claim's fence, ``running``, and
  (on the root's row) the ledger exactly as the step assumed it. PostgreSQL re-checks that
  ``WHERE`` on the newest row version after waiting for any lock on it, so a cancel, a
  reconcile or a sibling's reservation committed meanwhile makes it match nothing;
* every other write reads the turn's ``RETURNING`` row, so nothing is written when it matched
  nothing; the conversation's ``UPDATE ... RETURNING last_sequence`` numbers the messages;
* the statement ends with ``turnkit_step_guard()`` (migration 0007), which raises when a guard or
  a compare-and-set did not hold: the whole statement rolls back and the caller decides the step
  again under the tree lock.

Lock order stays tree, then conversation. Sent in autocommit, the statement is the step's only
round trip and its only commit.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import Subquery
from django.db.models.functions import Now

from ..base.states import TRANSITIONS, TurnStatus
from ..models import Conversation, Event, Lease, Message, ToolExecution, Turn, Wait
from . import leases, sql
from .compiled import CompiledRead
from .cursors import server_cursor
from .locks import Ledger, LedgerDelta
from .sql import Unsupported
from .turn_columns import TurnFields

#: The SQLSTATE ``turnkit_step_guard()`` raises with (see migration 0007).
GUARD_FAILED = "TK409"


@dataclass(frozen=True)
class Move:
    """A compare-and-set of a tool execution's status (see :meth:`Fenced.move_execution`)."""

    execution_id: str
    expected: tuple[str, ...]
    fields: dict[str, object]


@dataclass
class StepWrites:
    """The writes of one step, in the order they were made."""

    turn: TurnFields = field(default_factory=lambda: TurnFields())
    transition: str | None = None
    delta: LedgerDelta = field(default_factory=LedgerDelta)
    messages: list[Message] = field(default_factory=list)
    created: list[ToolExecution] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    #: Durable events of the step (see :mod:`.events`).
    events: list[Event] = field(default_factory=list)
    #: Whether the conversation's ``updated_at`` moves (a turn's terminal write).
    touch: bool = False
    #: A background turn's terminal write sent without its lane's hand-off: the conversation's
    #: ``last_sequence`` as this worker's last step left it (see :func:`statement`).
    lane: int | None = None
    #: The turn's columns its statement returns (a terminal write), and what it returned.
    returning: str | None = None
    returned: tuple[Any, ...] | None = None


# --------------------------------------------------------------------------- SQL pieces


def _ledger_guard(known: Ledger, params: list[object], db: BaseDatabaseWrapper) -> str:
    """The root row still holds the ledger the step was decided against."""
    counts = sql.json_text(sql.field_of(Turn, "tree_tool_counts"), known.tool_counts)
    limits = sql.json_text(sql.field_of(Turn, "options"), known.limits_json)
    params += [known.iterations, known.tool_executions, known.spend, counts, known.deadline_at,
               limits]
    return ("tree_iterations = %s AND tree_tool_executions = %s AND tree_spend = %s "
            "AND tree_tool_counts = %s::jsonb AND deadline_at IS NOT DISTINCT FROM %s "
            "AND (deadline_at IS NULL OR deadline_at > statement_timestamp()) "
            "AND (options -> 'limits') IS NOT DISTINCT FROM %s::jsonb")


def _root_first(root_id: str, ledger: Mapping[str, object], known: Ledger | None,
                params: list[object], db: BaseDatabaseWrapper) -> str:
    """CTE ``r``: the root's row locked first (the tree lock, in its order), its ``ledger``
    changes written, and with ``known`` only if the row still holds that ledger. The writes of
    the turn that follow read it (``EXISTS (SELECT FROM r)``)."""
    table = sql.table(Turn)
    text = (f"UPDATE {table} SET {sql.assign(Turn, ledger, params, db)}" if ledger
            else f"SELECT 1 FROM {table}")
    params.append(root_id)
    guard = "" if known is None else " AND " + _ledger_guard(known, params, db)
    return (f"r AS ({text} WHERE id = %s{guard}"
            + (" RETURNING 1)" if ledger else " FOR NO KEY UPDATE)"))


def _lane_guard(lane: int | None, params: list[object]) -> str:
    """The conversation's ``UPDATE`` of a terminal write sent without its lane's hand-off
    holds only on the row this worker's last step left (``lane``, its ``last_sequence``).

    A delivery to a busy conversation appends a message, so it moves ``last_sequence``. One
    appended before that step is seen by the statement's ``NOT EXISTS`` on buffered
    deliveries; one appended since is seen here, even when it commits between the statement's
    snapshot and its lock on the row, because PostgreSQL re-checks the ``WHERE`` on the row's
    newest version; one committed after the statement finds the turn finished and wakes the
    conversation itself. Either of the first two makes the statement write nothing, and the
    hand-off is decided under the lock."""
    if lane is None:
        return ""
    params.append(lane)
    return " AND last_sequence = %s"


#: Deliveries past a turn's input in its conversation (buffered for the next turn).
_BUFFERED = CompiledRead(lambda conversation_id, turn_id: Message.objects.deliveries_after(
    conversation_id, Subquery(Turn.objects.filter(pk=turn_id).values("context_sequence")[:1]),
).values_list("pk"), 2)


def statement(turn_id: str, root_id: str, conversation_id: str, fence: int,
              known: Ledger | None, writes: StepWrites) -> tuple[str, list[object]]:
    """The step as one statement; its one row is the conversation's new ``last_sequence``.

    ``known`` None: the caller holds the tree lock, so the ledger needs no guard."""
    db = sql.db()
    params: list[object] = []
    ctes: list[str] = []
    turn_table = sql.table(Turn)
    own = dict(writes.turn)
    if writes.transition is not None:
        transition = TRANSITIONS[writes.transition]
        if TurnStatus.RUNNING not in transition.sources:
            raise Unsupported(f"transition {writes.transition!r} does not leave running")
        own["status"] = transition.target
        own["updated_at"] = Now()
    ledger = writes.delta.fields()
    guard_source = ""
    if turn_id == root_id:
        own.update(ledger)
    elif ledger or known is not None:  # the root's row: its ledger changes, or is checked
        ctes.append(_root_first(root_id, ledger, known, params, db))
        guard_source = " AND EXISTS (SELECT FROM r)"
    if not own:
        own["fence"] = fence  # a no-op assignment: the guard still locks and checks the row
    assignments = sql.assign(Turn, own, params, db)
    params += [turn_id, fence, TurnStatus.RUNNING]
    # A pending control (pause, steer) refuses the fast path: the worker sees it under the lock.
    where = "id = %s AND fence = %s AND status = %s AND NOT controls_pending"
    if turn_id == root_id and known is not None:
        where += " AND " + _ledger_guard(known, params, db)
    ctes.append(f"t AS (UPDATE {turn_table} SET {assignments} WHERE {where}{guard_source} "
                f"RETURNING {writes.returning or 1})")
    checks = ["(SELECT count(*) FROM t) = 1"]
    if leases.ends(writes.transition):
        ctes.append(leases.drop_cte("d", turn_id, "t", params))
    count = len(writes.messages)
    if count or writes.touch:
        touch = ", updated_at = statement_timestamp()" if writes.touch else ""
        params += [count, conversation_id]
        guard = _lane_guard(writes.lane, params)
        ctes.append(f"s AS (UPDATE {sql.table(Conversation)} SET last_sequence = last_sequence "
                    f"+ %s{touch} WHERE id = %s AND EXISTS (SELECT FROM t){guard} "
                    "RETURNING last_sequence)")
        checks.append("(SELECT count(*) FROM s) = 1")
    elif writes.lane is not None:
        raise Unsupported("a lane guard without the conversation's row")
    for index, execution in enumerate(writes.created):
        ctes.append(sql.insert(f"x{index}", execution, params, source="t"))
    for index, message in enumerate(writes.messages):
        sequence = f"s.last_sequence - {count - 1 - index}"
        ctes.append(sql.insert(f"m{index}", message, params, source="s",
                            computed={"sequence": (sequence, [])}))
    if writes.events:
        ctes.append(sql.insert_events(writes.events, params))
    for index, move in enumerate(writes.moves):
        assignments = sql.assign(ToolExecution, move.fields, params, db)
        placeholders = ", ".join(["%s"] * len(move.expected))
        ctes.append(f"u{index} AS (UPDATE {sql.table(ToolExecution)} SET {assignments} "
                    f"WHERE id = %s AND status IN ({placeholders}) AND EXISTS (SELECT FROM t) "
                    "RETURNING 1)")
        params += [move.execution_id, *move.expected]
        checks.append(f"(SELECT count(*) FROM u{index}) = 1")
    if writes.lane is not None:  # its parameters follow every CTE's
        buffered, buffered_params = _BUFFERED.fragment(conversation_id, turn_id)
        checks.append(f"NOT EXISTS ({buffered})")
        params += buffered_params
    last = "(SELECT last_sequence FROM s)" if count or writes.touch else "NULL::bigint"
    text = f"WITH {', '.join(ctes)} SELECT turnkit_step_guard({' AND '.join(checks)}), {last}"
    if writes.returning:  # one row, whether or not the guard holds (it raises if not)
        text += ", t.* FROM (SELECT) AS one LEFT JOIN t ON true"
    return text, params


def send(turn_id: str, root_id: str, conversation_id: str, fence: int, known: Ledger | None,
         writes: StepWrites, *, savepoint: bool = True) -> bool:
    """Send the step; False (nothing written) when its fence or ledger moved.

    ``known`` None: the caller holds the tree lock inside its transaction (nothing can move,
    so a refusal would be a bug: it raises). Fills in the sequences of the step's messages and
    marks its rows saved. Inside a transaction, a refused statement is sent in a savepoint,
    so the transaction stays usable, unless the caller rolls it back itself (not
    ``savepoint``).
    """
    text, params = statement(turn_id, root_id, conversation_id, fence, known, writes)
    row = _guarded(text, params, guarded=known is not None, savepoint=savepoint)
    if row is None:
        return False
    db = sql.db()
    if writes.returning:
        writes.returned = row[2:]
    last = row[1]
    first = 0 if last is None else int(last) - len(writes.messages) + 1
    for index, message in enumerate(writes.messages):
        message.sequence = first + index
    for obj in (*writes.messages, *writes.created, *writes.events):
        obj._state.adding = False
        obj._state.db = db.alias
    return True


def insert_claimed(conversation: Conversation, message: Message | None, turn: Turn,
                   lease: Lease | None, lifetime: timedelta | None,
                   events: list[Event] | None = None, *,
                   submitted: bool = False) -> tuple[datetime, int]:
    """Insert a turn (with its conversation when new, its input, and when it is claimed its
    lease) as one statement; return the database's clock and the turn's input sequence.

    A claimed turn's times are the database's: ``started_at``, the lease's heartbeat, and the
    deadline ``lifetime`` after them. A ``submitted`` turn (a new root without waits, handed to
    background execution as it is created) takes ``submitted_at`` and its deadline from the
    same clock. Otherwise the turn is inserted as built (pending).
    """
    db = sql.db()
    params: list[object] = []
    ctes: list[str] = []
    table = sql.table(Conversation)
    if conversation._state.adding:
        conversation.last_sequence = 1 if message is not None else 0
        ctes.append(sql.insert("c", conversation, params, source="(SELECT 1) AS one"))
        ctes.append(f"s AS (SELECT {conversation.last_sequence}::bigint AS last_sequence)")
    elif message is not None:
        ctes.append(f"s AS (UPDATE {table} SET last_sequence = last_sequence + 1, "
                    "updated_at = statement_timestamp() WHERE id = %s RETURNING last_sequence)")
        params.append(conversation.pk)
    else:
        ctes.append(f"s AS (SELECT last_sequence FROM {table} WHERE id = %s)")
        params.append(conversation.pk)
    if message is not None:
        ctes.append(sql.insert("m", message, params, source="s",
                            computed={"sequence": ("s.last_sequence", [])}))
    now: tuple[str, list[object]] = ("statement_timestamp()", [])
    computed: dict[str, tuple[str, list[object]]] = {"context_sequence": ("s.last_sequence", [])}
    if lease is not None or submitted:
        computed.update({"started_at" if lease is not None else "submitted_at": now,
                         "updated_at": now,
                         "deadline_at": ("NULL::timestamptz", []) if lifetime is None else (
                             "statement_timestamp() + %s::interval", [lifetime])})
    ctes.append(sql.insert("t", turn, params, source="s", computed=computed))
    if lease is not None:
        ctes.append(sql.insert("l", lease, params, source="s", computed={"heartbeat_at": now}))
    if events:  # the input's event: the new tree's first
        ctes.append(sql.insert_events(events, params, source="s"))
    with server_cursor(db) as cursor:
        cursor.execute(f"WITH {', '.join(ctes)} SELECT statement_timestamp(), "
                       "(SELECT last_sequence FROM s)", params)
        at, sequence = cursor.fetchone()
    if sequence is None:
        raise Conversation.DoesNotExist(f"conversation {conversation.pk!r} does not exist")
    for obj in (conversation, message, turn, lease):
        if obj is not None:
            obj._state.adding = False
            obj._state.db = db.alias
    return at, int(sequence)


def quantized(amount: Decimal) -> Decimal:
    """``amount`` as a cost column stores it (8 decimal places, half away from zero)."""
    return amount.quantize(Decimal("1e-8"), rounding="ROUND_HALF_UP")


def _transition(turn_id: str, name: str, fields: Mapping[str, object], params: list[object],
                fence: int | None = None) -> str:
    """``UPDATE`` of ``turn_id`` along transition ``name`` with ``fields``: its source statuses
    (and ``fence``) in the ``WHERE``. Raises :class:`Unsupported` for a value it cannot express."""
    transition = TRANSITIONS[name]
    assignments = sql.assign(Turn, {**fields, "status": transition.target}, params, sql.db())
    sources = ", ".join(["%s"] * len(transition.sources))
    params += [turn_id, *transition.sources]
    where = f"id = %s AND status IN ({sources})"
    if fence is not None:
        where += " AND fence = %s"
        params.append(fence)
    return f"UPDATE {sql.table(Turn)} SET {assignments} WHERE {where}"


def transition_write(turn_id: str, name: str, fields: Mapping[str, object],
                     fence: int | None = None) -> bool:
    """Move ``turn_id`` along transition ``name`` with ``fields`` as one server-bound statement
    (PostgreSQL): prepared like the steps, without the ORM's query building. False, with
    nothing written, when the turn is in none of the transition's source statuses (or holds
    another ``fence``). Raises :class:`Unsupported` for a value it cannot express."""
    params: list[object] = []
    text = _transition(turn_id, name, fields, params, fence)
    if leases.ends(name):  # the lease goes with the turn's end, in the same statement
        text = (f"WITH t AS ({text} RETURNING 1), {leases.drop_cte('d', turn_id, 't', params)} "
                "SELECT count(*) FROM t")
    with server_cursor(sql.db()) as cursor:
        cursor.execute(text, params)
        return bool(cursor.fetchone()[0] if leases.ends(name) else cursor.rowcount)


def submit_write(turn_id: str, options: object, lifetime: timedelta | None,
                 returning: str) -> tuple[object, ...] | None:
    """Submit a root turn that has no waits as one statement (PostgreSQL): ``pending`` with
    ``submitted_at``, ``updated_at`` and (from ``lifetime``) its deadline set from the
    database's clock; return its row as ``returning`` (columns) selects it.

    The guard is what the locked submit would check: never submitted, a root, no wait edge,
    and its options still ``options`` (the lifetime was read from them). None, with nothing
    written, when it does not hold: the caller submits under the lock."""
    db = sql.db()
    params: list[object] = []
    deadline = None if lifetime is None else sql.Raw("statement_timestamp() + %s::interval",
                                                    (lifetime,))
    text = _transition(turn_id, "submit", {"submitted_at": Now(), "updated_at": Now(),
                                           "deadline_at": deadline}, params)
    params += [sql.field_of(Turn, "options").get_db_prep_save(options, db), turn_id]
    with server_cursor(db) as cursor:
        cursor.execute(f"{text} AND submitted_at IS NULL AND root_turn_id = id "
                       "AND options IS NOT DISTINCT FROM %s::jsonb AND NOT EXISTS (SELECT FROM "
                       f"{sql.table(Wait)} WHERE waiter_id = %s) RETURNING {returning}", params)
        row: tuple[object, ...] | None = cursor.fetchone()
    return row


def claim_write(turn_id: str, root_id: str, fields: Mapping[str, object],
                root_fields: Mapping[str, object], lease: Lease, *,
                version: str | None = None, known: Ledger | None = None) -> bool:
    """A claim's writes as one statement (PostgreSQL): the turn moves along the ``claim``
    transition with ``fields``, a child's root takes ``root_fields`` (its ledger), and the lease
    is written, replacing a previous claim's. False when the turn is in none of the
    transition's source statuses: then nothing of the turn or the lease is written, and a
    caller holding the tree lock rolls back its transaction (the root's row is written first).

    The caller holds the tree lock, or passes the ``version`` (``xmin``) of the turn's row it
    decided on: the write holds only if the row is still that version. A child decided without
    the lock passes ``known`` too, its root's ledger as read: the statement locks the root's row
    first (the tree lock, in its order) and holds only if the ledger is still that one; when
    either guard fails it raises inside the statement, so nothing of it is written."""
    db = sql.db()
    params: list[object] = []
    ctes: list[str] = []
    after_root = ""
    if root_fields or known is not None:  # the root's row first; the claim only with it
        ctes.append(_root_first(root_id, root_fields, known, params, db))
        after_root = " AND EXISTS (SELECT FROM r)"
    claimed = _transition(turn_id, "claim", {**fields, "updated_at": Now()}, params)
    if version is not None:
        claimed += " AND xmin = %s::xid"
        params.append(version)
    ctes.append(f"t AS ({claimed}{after_root} RETURNING 1)")
    turn_column, fence, worker, heartbeat = (sql.quote(sql.field_of(Lease, name).column)
                                             for name in ("turn", "fence", "worker",
                                                          "heartbeat_at"))
    ctes.append(f"l AS (INSERT INTO {sql.table(Lease)} ({turn_column}, {fence}, {worker}, "
                f"{heartbeat}) SELECT %s, %s, %s, %s FROM t ON CONFLICT ({turn_column}) DO "
                f"UPDATE SET {fence} = EXCLUDED.{fence}, {worker} = EXCLUDED.{worker}, "
                f"{heartbeat} = EXCLUDED.{heartbeat}, waiting_on = NULL, waiting_since = NULL "
                "RETURNING 1)")
    params += [lease.turn_id, lease.fence, lease.worker, lease.heartbeat_at]
    counts = ["(SELECT count(*) FROM t)", "(SELECT count(*) FROM l)"]
    if root_fields or known is not None:
        counts.append("(SELECT count(*) FROM r)")
    if known is None:
        text = f"WITH {', '.join(ctes)} SELECT {', '.join(counts)}"
    else:
        text = (f"WITH {', '.join(ctes)} SELECT turnkit_step_guard("
                f"{' AND '.join(f'{count} = 1' for count in counts)})")
    row = _guarded(text, params, guarded=known is not None)
    return bool(row and row[0])


def _guarded(text: str, params: list[object], *, guarded: bool,
             savepoint: bool = True) -> tuple[Any, ...] | None:
    """Send a statement that ends in ``turnkit_step_guard()``; its one row, or None when
    ``guarded`` and the guard raised (the statement rolled back, nothing of it written).
    Unguarded, its caller holds the tree lock, so a refusal would be a bug: it raises. Inside a
    transaction, a guarded statement is sent in a savepoint, so the transaction stays usable
    (a test case's block, not a lock holder's), unless the caller rolls it back itself (not
    ``savepoint``)."""
    db = sql.db()
    try:
        with (transaction.atomic() if savepoint and guarded and db.in_atomic_block
              else nullcontext()), server_cursor(db) as cursor:
            cursor.execute(text, params)
            row: tuple[Any, ...] | None = cursor.fetchone()
            return row
    except DatabaseError as exc:
        if guarded and getattr(exc.__cause__, "sqlstate", None) == GUARD_FAILED:
            return None
        raise


__all__ = ["GUARD_FAILED", "Move", "StepWrites", "Unsupported", "claim_write", "insert_claimed",
           "quantized", "send", "statement", "submit_write", "transition_write"]
