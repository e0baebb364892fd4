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

import functools
import json
from collections.abc import Callable, Mapping
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Model, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone

from ..models import Conversation, Event, Lease, Message, ToolExecution, Turn
from ..states import TRANSITIONS, TurnStatus
from .cursors import server_cursor
from .fields import TurnFields
from .locks import Ledger, LedgerDelta

#: The SQLSTATE ``turnkit_step_guard()`` raises with (see migration 0007).
GUARD_FAILED = "TK409"


class Unsupported(Exception):
    """A buffered write the single statement cannot express (the step takes the lock instead)."""


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


# --------------------------------------------------------------------------- SQL pieces


def _db() -> BaseDatabaseWrapper:
    """The connection itself (not the proxy, whose every attribute is a context-local lookup)."""
    return connections[DEFAULT_DB_ALIAS]


@functools.cache
def _quote(name: str | None) -> str:
    if not name:
        raise Unsupported("a field without a column")
    return _db().ops.quote_name(name)


#: Field types whose Python value is the driver's parameter as is on PostgreSQL (what their
#: ``get_db_prep_save`` returns for the values turnkit writes).
_AS_IS = frozenset({"AutoField", "BigIntegerField", "BooleanField", "CharField", "DateTimeField",
                    "DecimalField", "ForeignKey", "IntegerField", "OneToOneField",
                    "PositiveBigIntegerField", "PositiveIntegerField",
                    "PositiveSmallIntegerField", "SmallIntegerField", "TextField"})


def _preparer(field: Field[Any, Any], db: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """``field.get_db_prep_save`` for one field, without its generic dispatch per value."""
    kind = field.get_internal_type()
    if kind in _AS_IS:
        return _same
    if kind == "JSONField":
        encoder = getattr(field, "encoder", None)
        return lambda value: None if value is None else db.ops.adapt_json_value(value, encoder)
    return lambda value: field.get_db_prep_save(value, db)


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class _Column:
    column: str  # the column's name (the JSON record's key)
    attname: str
    name: str  # the model field's name
    to_json: Callable[[Any], Any]
    stamped: bool  # auto_now or auto_now_add: the insert's time


def _json_of(field: Field[Any, Any]) -> Callable[[Any], Any]:
    """How a value of ``field`` is written in a JSON record ``jsonb_populate_record`` reads."""
    kind = field.get_internal_type()
    if kind == "DateTimeField":
        return lambda value: None if value is None else value.isoformat()
    if kind == "DecimalField":
        return lambda value: None if value is None else str(value)
    return _same


@functools.cache
def _columns(model: type[Model]) -> tuple[_Column, ...]:
    """The concrete columns of ``model``, with how each is written in a JSON record."""
    return tuple(
        _Column(str(f.column), f.attname, f.name, _json_of(f),
                bool(getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)))
        for f in model._meta.concrete_fields)


@functools.cache
def _field(model: type[Model], name: str) -> Field[Any, Any]:
    found = model._meta.get_field(name)
    if not isinstance(found, Field):
        raise Unsupported(f"{model.__name__}.{name} is not a column")
    return found


@functools.cache
def _setter(model: type[Model], name: str) -> tuple[str, Callable[[Any], Any]]:
    """The quoted column of ``model.name`` and the preparer of its values."""
    model_field = _field(model, name)
    return _quote(model_field.column), _preparer(model_field, _db())


@functools.cache
def _table(model: type[Model]) -> str:
    return _quote(model._meta.db_table)


def _assign(model: type[Model], fields: Mapping[str, object], params: list[object],
            db: BaseDatabaseWrapper) -> str:
    """``SET`` assignments of ``fields``: values, ``Now()``, and ``F(name) + value``."""
    out = []
    for name, value in fields.items():
        column, prepare = _setter(model, name)
        if isinstance(value, Now):
            out.append(f"{column} = statement_timestamp()")
        elif isinstance(value, CombinedExpression):
            lhs, rhs = value.lhs, value.rhs
            if not (value.connector == "+" and isinstance(lhs, F)
                    and getattr(lhs, "name", None) == name):
                raise Unsupported(f"{name} = {value!r}")
            amount = rhs.value if isinstance(rhs, Value) else rhs
            out.append(f"{column} = {column} + %s")
            params.append(prepare(amount))
        elif hasattr(value, "resolve_expression"):
            raise Unsupported(f"{name} = {value!r}")
        else:
            out.append(f"{column} = %s")
            params.append(prepare(value))
    return ", ".join(out)


def _insert(name: str, obj: Model, params: list[object], *, source: str,
            computed: dict[str, tuple[str, list[object]]] | None = None) -> str:
    """A CTE inserting ``obj`` for each row of ``source`` (one row, or none).

    The row travels as one JSON record (one parameter, however many columns) that
    ``jsonb_populate_record`` turns into the table's row type; ``computed`` columns take an
    SQL expression (with its parameters) evaluated in the statement instead.
    """
    model = type(obj)
    record: dict[str, object] = {}
    now: datetime | None = None
    for column in _columns(model):
        if computed and column.name in computed:
            continue
        if column.stamped:  # what pre_save does for auto_now(_add) fields
            now = now or timezone.now()
            setattr(obj, column.attname, now)
        record[column.column] = column.to_json(getattr(obj, column.attname))
    params.append(json.dumps(record, separators=(",", ":")))
    table = _table(model)
    value = "%s::jsonb"
    if computed:
        pairs = []
        for field_name, (expression, extra) in computed.items():
            pairs.append(f"'{_field(model, field_name).column}', {expression}")
            params.extend(extra)
        value += f" || jsonb_build_object({', '.join(pairs)})"
    return (f"{name} AS (INSERT INTO {table} SELECT r.* FROM {source}, "
            f"jsonb_populate_record(NULL::{table}, {value}) AS r)")


def _insert_events(events: list[Event], params: list[object], source: str = "t") -> str:
    """One CTE inserting the step's events in order, their ids drawn from the sequence row by
    row, under the tree lock the statement holds (the tree's cursor order)."""
    records = []
    for event in events:
        event.created_at = event.created_at or timezone.now()
        records.append({c.column: c.to_json(getattr(event, c.attname))
                        for c in _columns(Event) if c.name != "id"})
    params += [json.dumps(records, separators=(",", ":")), Event._meta.db_table]
    table = _table(Event)
    return (f"e AS (INSERT INTO {table} SELECT r.* FROM {source}, "
            "jsonb_array_elements(%s::jsonb) "
            f"WITH ORDINALITY AS x(value, n), jsonb_populate_record(NULL::{table}, x.value || "
            "jsonb_build_object('id', nextval(pg_get_serial_sequence(%s, 'id')))) AS r "
            "ORDER BY x.n)")


def _ledger_guard(known: Ledger, params: list[object], db: BaseDatabaseWrapper) -> str:
    """The root row still holds the ledger the step was decided against."""
    counts = _field(Turn, "tree_tool_counts").get_db_prep_save(known.tool_counts, db)
    limits = _field(Turn, "options").get_db_prep_save(known.limits_json, db)
    params += [known.iterations, known.tool_executions, known.spend, counts, known.deadline_at,
               limits]
    return ("tree_iterations = %s AND tree_tool_executions = %s AND tree_spend = %s "
            "AND tree_tool_counts = %s AND deadline_at IS NOT DISTINCT FROM %s "
            "AND (deadline_at IS NULL OR deadline_at > statement_timestamp()) "
            "AND (options -> 'limits') IS NOT DISTINCT FROM %s::jsonb")


def statement(turn_id: str, root_id: str, conversation_id: str, fence: int,
              known: Ledger | None, writes: StepWrites) -> tuple[str, list[object]]:
    """The step as one statement; its one row is the conversation's new ``last_sequence``.

    ``known`` None: the caller holds the tree lock, so the ledger needs no guard."""
    db = _db()
    params: list[object] = []
    ctes: list[str] = []
    turn_table = _table(Turn)
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
        if ledger:
            assignments = _assign(Turn, ledger, params, db)
            ctes.append(f"r AS (UPDATE {turn_table} SET {assignments} WHERE id = %s")
        else:
            ctes.append(f"r AS (SELECT 1 FROM {turn_table} WHERE id = %s")
        params.append(root_id)
        guard = "" if known is None else " AND " + _ledger_guard(known, params, db)
        ctes[-1] += guard + (" RETURNING 1)" if ledger else " FOR NO KEY UPDATE)")
        guard_source = " AND EXISTS (SELECT FROM r)"
    if not own:
        own["fence"] = fence  # a no-op assignment: the guard still locks and checks the row
    assignments = _assign(Turn, own, params, db)
    params += [turn_id, fence, TurnStatus.RUNNING]
    # A pending control (pause, steer) refuses the fast path: the worker sees it under the lock.
    where = "id = %s AND fence = %s AND status = %s AND NOT controls_pending"
    if turn_id == root_id and known is not None:
        where += " AND " + _ledger_guard(known, params, db)
    ctes.append(f"t AS (UPDATE {turn_table} SET {assignments} WHERE {where}{guard_source} "
                "RETURNING 1)")
    checks = ["(SELECT count(*) FROM t) = 1"]
    count = len(writes.messages)
    if count or writes.touch:
        touch = ", updated_at = statement_timestamp()" if writes.touch else ""
        ctes.append(f"s AS (UPDATE {_table(Conversation)} SET last_sequence = last_sequence "
                    f"+ %s{touch} WHERE id = %s AND EXISTS (SELECT FROM t) "
                    "RETURNING last_sequence)")
        params += [count, conversation_id]
        checks.append("(SELECT count(*) FROM s) = 1")
    for index, execution in enumerate(writes.created):
        ctes.append(_insert(f"x{index}", execution, params, source="t"))
    for index, message in enumerate(writes.messages):
        sequence = f"s.last_sequence - {count - 1 - index}"
        ctes.append(_insert(f"m{index}", message, params, source="s",
                            computed={"sequence": (sequence, [])}))
    if writes.events:
        ctes.append(_insert_events(writes.events, params))
    for index, move in enumerate(writes.moves):
        assignments = _assign(ToolExecution, move.fields, params, db)
        placeholders = ", ".join(["%s"] * len(move.expected))
        ctes.append(f"u{index} AS (UPDATE {_table(ToolExecution)} SET {assignments} "
                    f"WHERE id = %s AND status IN ({placeholders}) AND EXISTS (SELECT FROM t) "
                    "RETURNING 1)")
        params += [move.execution_id, *move.expected]
        checks.append(f"(SELECT count(*) FROM u{index}) = 1")
    last = "(SELECT last_sequence FROM s)" if count or writes.touch else "NULL::bigint"
    sql = (f"WITH {', '.join(ctes)} SELECT turnkit_step_guard({' AND '.join(checks)}), {last}")
    return sql, params


def send(turn_id: str, root_id: str, conversation_id: str, fence: int, known: Ledger | None,
         writes: StepWrites) -> bool:
    """Send the step; False (nothing written) when its fence or ledger moved.

    ``known`` None: the caller holds the tree lock inside its transaction (nothing can move,
    so a refusal would be a bug: it raises). Fills in the sequences of the step's messages and
    marks its rows saved.
    """
    sql, params = statement(turn_id, root_id, conversation_id, fence, known, writes)
    db = _db()
    try:
        # A test case's block (not a lock holder's) is kept usable after a refusal.
        with (transaction.atomic() if known is not None and db.in_atomic_block
              else nullcontext()), server_cursor(db) as cursor:
            cursor.execute(sql, params)
            row = cursor.fetchone()
    except DatabaseError as exc:
        if known is not None and getattr(exc.__cause__, "sqlstate", None) == GUARD_FAILED:
            return False
        raise
    last = row[1] if row else None
    first = 0 if last is None else int(last) - len(writes.messages) + 1
    for index, message in enumerate(writes.messages):
        message.sequence = first + index
    for obj in (*writes.messages, *writes.created, *writes.events):
        obj._state.adding = False
        obj._state.db = db.alias
    return True


def insert_claimed(conversation: Conversation, message: Message | None, turn: Turn,
                   lease: Lease | None, lifetime: timedelta | None,
                   events: list[Event] | None = None) -> tuple[datetime, int]:
    """Insert a turn (with its conversation when new, its input, and when it is claimed its
    lease) as one statement; return the database's clock and the turn's input sequence.

    A claimed turn's times are the database's: ``started_at``, the lease's heartbeat, and the
    deadline ``lifetime`` after them. Without a lease the turn is inserted as built (pending).
    """
    db = _db()
    params: list[object] = []
    ctes: list[str] = []
    table = _table(Conversation)
    if conversation._state.adding:
        conversation.last_sequence = 1 if message is not None else 0
        ctes.append(_insert("c", conversation, params, source="(SELECT 1) AS one"))
        ctes.append(f"s AS (SELECT {conversation.last_sequence}::bigint AS last_sequence)")
    elif message is not None:
        ctes.append(f"s AS (UPDATE {table} SET last_sequence = last_sequence + 1, "
                    "updated_at = statement_timestamp() WHERE id = %s RETURNING last_sequence)")
        params.append(conversation.pk)
    else:
        ctes.append(f"s AS (SELECT last_sequence FROM {table} WHERE id = %s)")
        params.append(conversation.pk)
    if message is not None:
        ctes.append(_insert("m", message, params, source="s",
                            computed={"sequence": ("s.last_sequence", [])}))
    now: tuple[str, list[object]] = ("statement_timestamp()", [])
    computed: dict[str, tuple[str, list[object]]] = {"context_sequence": ("s.last_sequence", [])}
    if lease is not None:
        computed.update({"started_at": now, "updated_at": now,
                         "deadline_at": ("NULL::timestamptz", []) if lifetime is None else (
                             "statement_timestamp() + %s::interval", [lifetime])})
    ctes.append(_insert("t", turn, params, source="s", computed=computed))
    if lease is not None:
        ctes.append(_insert("l", lease, params, source="s", computed={"heartbeat_at": now}))
    if events:  # the input's event: the new tree's first
        ctes.append(_insert_events(events, params, source="s"))
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


__all__ = ["GUARD_FAILED", "Move", "StepWrites", "Unsupported", "insert_claimed", "quantized",
           "send", "statement"]
