"""The floor: one bare transaction per step holding an INSERT and an UPDATE.

The physical minimum for a durable step that appends a record and moves a cursor, through the
plain driver (psycopg, or the standard library's sqlite3) with no framework. No Django here, so
``make bench-peers`` uses the same floor.
"""

from __future__ import annotations

import sqlite3
from typing import Any

import psycopg

STEPS_PER_TURN = 5  # workload T: model, tool, model, tool, model
PAYLOAD = '{"step": 1, "note": "a durable step"}'

_CREATE = (
    "DROP TABLE IF EXISTS bench_floor_log",
    "DROP TABLE IF EXISTS bench_floor_cursor",
    "CREATE TABLE bench_floor_cursor (id integer PRIMARY KEY, step integer NOT NULL)",
    "INSERT INTO bench_floor_cursor VALUES (1, 0)",
)


class PostgresFloor:
    """One psycopg connection; a step is BEGIN, INSERT, UPDATE, COMMIT (psycopg sends BEGIN as
    a statement of its own: four round trips)."""

    name = "floor: psycopg, one transaction per step (INSERT + UPDATE)"

    def __init__(self, url: str) -> None:
        self.conn = psycopg.connect(url)
        with self.conn.transaction():
            for sql in _CREATE:
                self.conn.execute(sql)
            self.conn.execute("CREATE TABLE bench_floor_log (id bigserial PRIMARY KEY, "
                              "cursor_id integer NOT NULL, payload jsonb NOT NULL)")
        self.conn.commit()

    @property
    def connection(self) -> Any:
        return self.conn

    @property
    def backend_pid(self) -> int:
        return int(self.conn.info.backend_pid)

    def step(self) -> None:
        with self.conn.cursor() as cursor:
            cursor.execute("INSERT INTO bench_floor_log (cursor_id, payload) VALUES (1, %s)",
                           [PAYLOAD])
            cursor.execute("UPDATE bench_floor_cursor SET step = step + 1 WHERE id = 1")
        self.conn.commit()

    def turn(self) -> None:
        for _ in range(STEPS_PER_TURN):
            self.step()

    def close(self) -> None:
        self.conn.close()


class SqliteFloor:
    """One sqlite3 connection to the database file; a step is BEGIN IMMEDIATE, INSERT, UPDATE,
    COMMIT (the transaction mode the bench's Django database uses)."""

    name = "floor: sqlite3, one transaction per step (INSERT + UPDATE)"

    def __init__(self, path: str) -> None:
        self.conn = sqlite3.connect(path, isolation_level=None)
        for sql in _CREATE:
            self.conn.execute(sql)
        self.conn.execute("CREATE TABLE bench_floor_log (id integer PRIMARY KEY AUTOINCREMENT, "
                          "cursor_id integer NOT NULL, payload text NOT NULL)")

    def step(self) -> None:
        self.conn.execute("BEGIN IMMEDIATE")
        self.conn.execute("INSERT INTO bench_floor_log (cursor_id, payload) VALUES (1, ?)",
                          [PAYLOAD])
        self.conn.execute("UPDATE bench_floor_cursor SET step = step + 1 WHERE id = 1")
        self.conn.execute("COMMIT")

    def turn(self) -> None:
        for _ in range(STEPS_PER_TURN):
            self.step()

    def close(self) -> None:
        self.conn.close()


__all__ = ["PAYLOAD", "STEPS_PER_TURN", "PostgresFloor", "SqliteFloor"]
