"""A turn's database session between its steps: handed back to Django's pool while it waits.

A turn spends most of its life waiting (a model call takes seconds, a step's write about a
millisecond). With Django's connection pool configured (``DATABASES["default"]["OPTIONS"]
["pool"]``, psycopg's pool, Django >= 5.1), :func:`release_session` closes the thread's
connection before each wait, which hands it back to the pool; the next store call takes one
again. So the pool's ``max_size`` bounds the sessions a worker holds, not the number of turns
it runs (``celery worker --pool threads --concurrency 1000``).

Without a pool the connection is kept: opening a new session for every step would cost more
than the idle session does, and behaviour is the same either way. Inside a transaction (a test
case's, or an application's, which inline runs refuse) nothing is released.
"""

from __future__ import annotations

from django.db import DEFAULT_DB_ALIAS, connections


def pooled(alias: str = DEFAULT_DB_ALIAS) -> bool:
    """Whether the database ``alias`` has Django's connection pool configured."""
    options = connections[alias].settings_dict.get("OPTIONS") or {}
    return bool(options.get("pool"))


def release_session() -> None:
    """Hand the default connection back to the pool before a wait (see the module docstring);
    a no-op without a pool, without an open connection, or inside a transaction."""
    connection = connections[DEFAULT_DB_ALIAS]
    if connection.connection is None or connection.in_atomic_block or not pooled():
        return
    connection.close()


__all__ = ["pooled", "release_session"]
