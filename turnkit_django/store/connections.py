"""The database session of a thread that is not a request: the heartbeat thread's.

Django opens a session on a thread's first query and closes a request's when the request ends
(``close_old_connections``). A thread of its own, such as the one that beats for every claimed
turn, treats its session the same way through these functions, so the runtime imports no
``django.db`` (issue 36).
"""

from __future__ import annotations

from django.db import close_old_connections, connection


def open_session() -> None:
    """Make sure the thread's default connection is open (``ensure_connection``)."""
    connection.ensure_connection()


def close_old_sessions() -> None:
    """Close the thread's sessions that ``CONN_MAX_AGE`` or an error made unusable, as Django
    does at a request's end (``close_old_connections``)."""
    close_old_connections()


def in_transaction() -> bool:
    """Whether the thread's default connection is inside an ``atomic()`` block."""
    return connection.in_atomic_block


def holds_session() -> bool:
    """Whether the thread's default connection has a session open."""
    return connection.connection is not None


def close_session() -> None:
    """Close the thread's default connection (handed back to the pool, if there is one)."""
    connection.close()


__all__ = ["close_old_sessions", "close_session", "holds_session", "in_transaction",
           "open_session"]
