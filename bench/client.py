"""What Django's connection sent: statements, transaction control and transactions (client side).

Django logs ``BEGIN``, ``COMMIT`` and ``ROLLBACK`` with the statements (``connection.queries``),
so the log is the client's side of the round trips: on PostgreSQL, psycopg sends BEGIN as a
statement of its own when the first statement of a transaction runs (one round trip each, unless
a psycopg pipeline batches several). A statement outside ``BEGIN ... COMMIT`` is a transaction of
its own (autocommit).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")


@dataclass(frozen=True)
class ClientCost:
    sql: tuple[str, ...]

    @property
    def statements(self) -> int:
        """Statements other than transaction control."""
        return sum(1 for s in self.sql if not s.upper().startswith(_CONTROL))

    @property
    def round_trips(self) -> int:
        """Everything sent, transaction control included."""
        return len(self.sql)

    @property
    def commits(self) -> int:
        return sum(1 for s in self.sql if s.upper() == "COMMIT")

    @property
    def transactions(self) -> int:
        """COMMITs plus the statements that ran outside a transaction block (autocommit)."""
        inside, alone = False, 0
        for sql in self.sql:
            word = sql.upper()
            if word.startswith("BEGIN"):
                inside = True
            elif word in ("COMMIT", "ROLLBACK"):
                inside = False
            elif not inside and not word.startswith(_CONTROL):
                alone += 1
        return self.commits + alone


def capture(fn: Callable[[], Any]) -> ClientCost:
    """Run ``fn`` and return what the default connection sent meanwhile."""
    with CaptureQueriesContext(connection) as captured:
        fn()
    return ClientCost(tuple(q["sql"] for q in captured.captured_queries))


__all__ = ["ClientCost", "capture"]
