"""Cursors that bind parameters on the server, for turnkit's hot statements on PostgreSQL.

Django's own queries bind on the client (psycopg's ``ClientCursor``: values quoted into the
text), which can never be prepared. The statements a turn sends at every step, and the reads
compiled once per process (:mod:`.compiled`), are sent with their values apart from their text
instead, so that psycopg prepares them when the project enables ``prepare_threshold`` in the
database's ``OPTIONS`` (Django leaves it off for poolers in transaction mode): PostgreSQL then
plans each of them once per connection, not at every execution.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.backends.utils import CursorDebugWrapper

if TYPE_CHECKING:
    from django.db.backends.utils import _ExecuteParameters, _ExecuteQuery


def server_cursor(db: BaseDatabaseWrapper) -> Any:
    """A server-binding cursor on ``db`` (PostgreSQL through psycopg 3, the driver Django's
    backend imported: turnkit imports no driver itself, so SQLite needs none; with psycopg2,
    Django's own cursor), wrapped as Django wraps its own: query logging and
    ``execute_wrapper()`` instrumentation see it. Like Django's own cursors, it runs
    the ``CONN_HEALTH_CHECKS`` check first when one is due: a kept session the database has
    closed is replaced here instead of failing the statement."""
    # psycopg 3 has a server-binding Cursor; psycopg2 binds on the client
    server = getattr(getattr(db, "Database", None), "Cursor", None)
    if server is None:
        return db.cursor()
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    with db.wrap_database_errors:
        raw: Any = server(db.connection)
    return _Logged(raw, db) if db.queries_logged else db.make_cursor(raw)


def hot_cursor(db: BaseDatabaseWrapper) -> Any:
    """A cursor for a hot statement: server-binding on PostgreSQL, Django's own elsewhere."""
    return server_cursor(db) if db.vendor == "postgresql" else db.cursor()


class _Logged(CursorDebugWrapper):
    """Django's query logging for a server-bound statement: the text as sent (Django reads the
    text back from psycopg, which has none to give for a prepared statement)."""

    def execute(self, sql: _ExecuteQuery, params: _ExecuteParameters = None) -> Any:
        with self.debug_sql(sql if isinstance(sql, str) else repr(sql), params):
            return super(CursorDebugWrapper, self).execute(sql, params)


__all__ = ["hot_cursor", "server_cursor"]
