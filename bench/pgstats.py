"""What the PostgreSQL server saw: statements, transactions, WAL, HOT updates and index growth.

Plain psycopg, no Django, so that ``make bench`` and ``make bench-peers`` (a virtual environment
of its own) share it. The observer reads from the ``postgres`` database, so its own queries never
count in the databases it measures: each measured system has a database of its own
(``pg_stat_statements`` and ``pg_stat_database`` are filtered by database).

The server must load ``pg_stat_statements`` (``shared_preload_libraries``, with
``pg_stat_statements.track = all`` to see the statements run inside others, such as foreign-key
checks); ``scripts/bench.sh`` starts it so.

Statistics other than ``pg_stat_statements`` reach the shared counters when a backend flushes
them (at most once a second, or at exit): a measured block ends with :func:`flush` on the
measured connections, which forces the flush before the next read.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg

FLUSH = "SELECT pg_stat_force_next_flush()"
# PostgreSQL's referential-integrity triggers run "SELECT 1 FROM ONLY <table> x WHERE ... FOR
# KEY SHARE OF x" for each checked row.
_FK_CHECK = "FOR KEY SHARE OF x"
# Statements a measurement sends itself, never counted.
_OWN = ("pg_stat_force_next_flush", "pg_stat_statements_reset", "pg_stat_reset_single_table")


def with_database(url: str, name: str) -> str:
    """``url`` pointing at database ``name`` on the same server."""
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, f"/{name}", parts.query, parts.fragment))


def database_of(url: str) -> str:
    return urlsplit(url).path.lstrip("/")


def flush(connection: Any) -> int:
    """Make a measured backend publish its pending statistics; return the transactions that
    took (one).

    ``connection`` is a psycopg connection or a DB-API cursor factory such as Django's.
    """
    with connection.cursor() as cursor:
        cursor.execute(FLUSH)
        cursor.fetchall()
    if isinstance(connection, psycopg.Connection) and not connection.autocommit:
        connection.commit()  # the flush happens when the backend is idle outside a transaction
    return 1


@dataclass
class Statements:
    """``pg_stat_statements`` calls in one database since the last reset."""

    top: int = 0  # top-level statements (BEGIN and COMMIT included, and the checks below)
    fk: int = 0  # foreign-key checks (not sent by a client)
    fk_top: int = 0  # the deferred ones: they run at COMMIT, seen as top level
    nested: int = 0  # other statements run inside others (functions)
    begin: int = 0
    commit: int = 0
    rollback: int = 0
    savepoint: int = 0
    rows: list[tuple[bool, int, str]] = field(default_factory=list)  # (toplevel, calls, query)

    @property
    def sent(self) -> int:
        """What the clients sent: one round trip each, unless a pipeline batches several."""
        return self.top - self.fk_top

    @property
    def data(self) -> int:
        """Statements sent other than transaction control."""
        return self.sent - self.begin - self.commit - self.rollback - self.savepoint


@dataclass
class Tables:
    """Per-table counters of one database since their reset."""

    inserted: dict[str, int]
    updated: dict[str, int]
    hot: dict[str, int]
    index_entries: int  # at most: each insert and non-HOT update adds one entry per index
    partial_index_entries: int  # the part of index_entries in partial indexes (maybe fewer)
    index_bytes: int


@dataclass
class Block:
    """What one measured block cost, divided by nothing (the caller divides by its turns)."""

    statements: Statements
    xact_commit: int
    wal_bytes: int
    wal_fpi: int
    tables: Tables | None


class Observer:
    """A connection to the ``postgres`` database of the server behind ``url``."""

    def __init__(self, url: str) -> None:
        self.url = url
        self.conn = psycopg.connect(with_database(url, "postgres"), autocommit=True)
        self.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")

    def close(self) -> None:
        self.conn.close()

    def execute(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cursor:
            cursor.execute(sql, params)  # type: ignore[arg-type]
            return cursor.fetchall() if cursor.description else []

    def scalar(self, sql: str, params: Sequence[Any] = ()) -> Any:
        return self.execute(sql, params)[0][0]

    # -- setup -------------------------------------------------------------------------------

    def create_database(self, name: str, *, drop: bool = True) -> str:
        """A fresh database ``name`` with ``pg_stat_statements``; return its URL."""
        if drop:
            self.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
        exists = self.scalar("SELECT count(*) FROM pg_database WHERE datname = %s", [name])
        if not exists:
            self.execute(f'CREATE DATABASE "{name}"')
        url = with_database(self.url, name)
        with psycopg.connect(url, autocommit=True) as conn:
            conn.execute("CREATE EXTENSION IF NOT EXISTS pg_stat_statements")
        return url

    def settings(self) -> dict[str, str]:
        names = ["server_version", "fsync", "synchronous_commit", "full_page_writes",
                 "shared_buffers", "wal_level", "pg_stat_statements.track"]
        rows = self.execute("SELECT name, setting FROM pg_settings WHERE name = ANY(%s)", [names])
        return dict(rows)

    # -- counters ----------------------------------------------------------------------------

    def reset_statements(self) -> None:
        self.execute("SELECT pg_stat_statements_reset()")

    def statements(self, database: str) -> Statements:
        rows = self.execute(
            "SELECT s.toplevel, s.calls, s.query FROM pg_stat_statements s "
            "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", [database])
        out = Statements()
        for toplevel, calls, query in rows:
            if any(own in query for own in _OWN):
                continue
            out.rows.append((toplevel, calls, query))
            if _FK_CHECK in query:
                out.fk += calls
                if toplevel:
                    out.top += calls
                    out.fk_top += calls
                continue
            if not toplevel:
                out.nested += calls
                continue
            out.top += calls
            word = query.lstrip().split(None, 1)[0].upper() if query.strip() else ""
            if word in ("BEGIN", "START"):
                out.begin += calls
            elif word in ("COMMIT", "END"):
                out.commit += calls
            elif word == "ROLLBACK" and "SAVEPOINT" not in query.upper():
                out.rollback += calls
            elif word in ("SAVEPOINT", "RELEASE") or query.upper().startswith("ROLLBACK TO"):
                out.savepoint += calls
        return out

    def xact_commit(self, database: str) -> int:
        self.execute("SELECT pg_stat_clear_snapshot()")
        return int(self.scalar("SELECT xact_commit FROM pg_stat_database WHERE datname = %s",
                               [database]))

    def wal_lsn(self) -> int:
        return int(self.scalar("SELECT pg_wal_lsn_diff(pg_current_wal_lsn(), '0/0')"))

    def wal_fpi(self) -> int:
        self.execute("SELECT pg_stat_clear_snapshot()")
        return int(self.scalar("SELECT wal_fpi FROM pg_stat_wal"))

    def checkpoint(self) -> None:
        self.execute("CHECKPOINT")


class TableWatch:
    """Per-table counters of the tables named ``prefix%`` in one database (a connection of its
    own in that database: reset before the block, read after it)."""

    def __init__(self, url: str, prefix: str) -> None:
        self.conn = psycopg.connect(url, autocommit=True)
        self.prefix = prefix
        self._index_bytes = 0

    def close(self) -> None:
        self.conn.close()

    def _rows(self, sql: str) -> list[tuple[Any, ...]]:
        with self.conn.cursor() as cursor:
            cursor.execute(sql, [self.prefix + "%"])
            return cursor.fetchall()

    def index_bytes(self) -> int:
        return int(self._rows(
            "SELECT coalesce(sum(pg_relation_size(i.indexrelid)), 0) FROM pg_index i "
            "JOIN pg_class t ON t.oid = i.indrelid WHERE t.relname LIKE %s")[0][0])

    def reset(self) -> None:
        self._rows("SELECT pg_stat_reset_single_table_counters(c.oid) FROM pg_class c "
                   "WHERE c.relname LIKE %s AND c.relkind = 'r'")
        self._index_bytes = self.index_bytes()
        flush(self.conn)  # its own transactions are published now, before the block starts

    def read(self) -> Tables:
        self.conn.execute("SELECT pg_stat_clear_snapshot()")
        stats = self._rows(
            "SELECT s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, "
            "  (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid), "
            "  (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid "
            "     AND i.indpred IS NOT NULL) "
            "FROM pg_stat_user_tables s WHERE s.relname LIKE %s")
        inserted, updated, hot = {}, {}, {}
        entries = partial = 0
        for name, ins, upd, hot_upd, indexes, partial_indexes in stats:
            inserted[name], updated[name], hot[name] = ins, upd, hot_upd
            entries += (ins + upd - hot_upd) * indexes
            partial += (ins + upd - hot_upd) * partial_indexes
        return Tables(inserted, updated, hot, entries, partial,
                      self.index_bytes() - self._index_bytes)


Flush = Callable[[], int]


def flusher(connection: Any) -> Flush:
    return lambda: flush(connection)


@contextmanager
def measured(observer: Observer, database: str, *, tables: TableWatch | None = None,
             checkpoint: bool = False, flush_with: Iterable[Flush] = ()) -> Iterator[list[Block]]:
    """Measure the block inside: yields a list that holds its :class:`Block` afterwards.

    ``flush_with``: callables publishing the statistics of the connections the block used (see
    :func:`flush`), called before and after it; each returns the transactions it committed
    itself, subtracted. ``checkpoint``: CHECKPOINT first, so the block pays the full-page writes
    of the first change of each page.
    """
    flushes = list(flush_with)
    if checkpoint:
        observer.checkpoint()
    for publish in flushes:  # what they did before the block is published before it
        publish()
    if tables is not None:  # after the flush: a reset first would let earlier rows count
        tables.reset()
    observer.reset_statements()
    xacts, lsn, fpi = observer.xact_commit(database), observer.wal_lsn(), observer.wal_fpi()
    out: list[Block] = []
    yield out
    wal = observer.wal_lsn() - lsn
    statements = observer.statements(database)  # before the flushes, which are statements
    flushed = sum(publish() for publish in flushes)
    out.append(Block(statements, observer.xact_commit(database) - xacts - flushed, wal,
                     observer.wal_fpi() - fpi, tables.read() if tables is not None else None))


def per_turn(observer: Observer, database: str, url: str, prefix: str, block: Callable[[], None],
             flushes: Sequence[Flush], turns: int, steps: int) -> dict[str, Any]:
    """What ``block`` (``turns`` turns of ``steps`` steps) costs the server, per turn.

    Two blocks: right after a CHECKPOINT (the full-page writes of each page's first change),
    then in steady state (the numbers reported without a qualifier). Tables: those named
    ``prefix%`` in ``database`` (at ``url``).
    """
    watch = TableWatch(url, prefix)
    try:
        blocks = []
        for checkpoint in (True, False):
            with measured(observer, database, tables=watch, checkpoint=checkpoint,
                          flush_with=flushes) as out:
                block()
            blocks.append(out[0])
    finally:
        watch.close()
    cold, steady = blocks
    st, tables = steady.statements, steady.tables
    assert tables is not None
    return {
        "statements": st.sent / turns, "fk": st.fk / turns, "nested": st.nested / turns,
        "begin": st.begin / turns, "commit": st.commit / turns,
        "savepoint": st.savepoint / turns, "round_trips_step": st.sent / turns / steps,
        "xacts": steady.xact_commit / turns,
        "wal": steady.wal_bytes / turns, "wal_cold": cold.wal_bytes / turns,
        "fpi": steady.wal_fpi / turns, "fpi_cold": cold.wal_fpi / turns,
        "index_entries": tables.index_entries / turns,
        "partial_index_entries": tables.partial_index_entries / turns,
        "index_bytes": tables.index_bytes / turns,
        "inserted": {k: v / turns for k, v in tables.inserted.items() if v},
        "hot": {name: [tables.hot.get(name, 0), updated]
                for name, updated in tables.updated.items() if updated},
        "top_statements": sorted(((c, q[:160]) for t, c, q in st.rows if t), reverse=True)[:40],
    }


__all__ = ["Block", "Flush", "Observer", "Statements", "TableWatch", "Tables", "database_of",
           "flush", "flusher", "measured", "per_turn", "with_database"]
