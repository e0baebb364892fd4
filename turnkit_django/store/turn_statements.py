"""A turn's writes other than a step, each as one server-bound statement (PostgreSQL).

Prepared like the steps (:mod:`.steps`), without the ORM's query building: a turn created
(claimed, submitted, or pending) with its conversation, input and lease
(:func:`insert_claimed`), a named transition (:func:`transition_write`), a root's submit
(:func:`submit_write`) and a claim with its lease (:func:`claim_write`). Each raises
:class:`~.sql.Unsupported` for a value it cannot express; the caller takes the ORM then.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime, timedelta

from django.db.models.functions import Now

from ..base.states import TRANSITIONS
from ..models import Conversation, Event, Lease, Message, Turn, Wait
from . import leases, sql
from .cursors import server_cursor
from .guard import root_first, send_guarded
from .locks import Ledger


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
        ctes.append(root_first(root_id, root_fields, known, params, db))
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
    row = send_guarded(text, params, guarded=known is not None)
    return bool(row and row[0])


__all__ = ["claim_write", "insert_claimed", "submit_write", "transition_write"]
