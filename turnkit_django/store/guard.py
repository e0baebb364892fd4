"""The guard of a write sent as one statement without the tree lock, and how it is sent.

A step (:mod:`.steps`) and a child's claim (:func:`.turn_statements.claim_write`) decided
without the lock hold only while the root's row still has the ledger they were decided against:
:func:`root_first` locks that row first (the tree lock, in its order) and checks it
(:func:`ledger_guard`). Such a statement ends with ``turnkit_step_guard()`` (migration 0007),
which raises when a guard did not hold; :func:`send_guarded` sends it and answers None then,
with nothing of it written.
"""

from __future__ import annotations

from collections.abc import Mapping
from contextlib import nullcontext
from typing import Any

from django.db import DatabaseError, transaction
from django.db.backends.base.base import BaseDatabaseWrapper

from ..models import Turn
from . import sql
from .cursors import server_cursor
from .locks import Ledger

#: The SQLSTATE ``turnkit_step_guard()`` raises with (see migration 0007).
GUARD_FAILED = "TK409"


def ledger_guard(known: Ledger, params: list[object], db: BaseDatabaseWrapper) -> str:
    """The root row still holds the ledger the step was decided against."""
    counts = sql.json_text(sql.field_of(Turn, "tree_tool_counts"), known.tool_counts)
    limits = sql.json_text(sql.field_of(Turn, "options"), known.limits_json)
    params += [known.iterations, known.tool_executions, known.spend, counts, known.deadline_at,
               limits]
    return ("tree_iterations = %s AND tree_tool_executions = %s AND tree_spend = %s "
            "AND tree_tool_counts = %s::jsonb AND deadline_at IS NOT DISTINCT FROM %s "
            "AND (deadline_at IS NULL OR deadline_at > statement_timestamp()) "
            "AND (options -> 'limits') IS NOT DISTINCT FROM %s::jsonb")


def root_first(root_id: str, ledger: Mapping[str, object], known: Ledger | None,
                params: list[object], db: BaseDatabaseWrapper) -> str:
    """CTE ``r``: the root's row locked first (the tree lock, in its order), its ``ledger``
    changes written, and with ``known`` only if the row still holds that ledger. The writes of
    the turn that follow read it (``EXISTS (SELECT FROM r)``)."""
    table = sql.table(Turn)
    text = (f"UPDATE {table} SET {sql.assign(Turn, ledger, params, db)}" if ledger
            else f"SELECT 1 FROM {table}")
    params.append(root_id)
    guard = "" if known is None else " AND " + ledger_guard(known, params, db)
    return (f"r AS ({text} WHERE id = %s{guard}"
            + (" RETURNING 1)" if ledger else " FOR NO KEY UPDATE)"))


def send_guarded(text: str, params: list[object], *, guarded: bool,
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


__all__ = ["GUARD_FAILED", "ledger_guard", "root_first", "send_guarded"]
