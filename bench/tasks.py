"""The bare task of the throughput benchmark: one transaction (INSERT + UPDATE) per step.

What a Celery task doing one durable step costs in the same project (same Django, same database
connection settings, same broker), to compare a background turn with. Importing this module also
registers the benchmark's agents in the worker (``bench.workload``).
"""

from __future__ import annotations

from celery import shared_task
from django.db import connection, transaction

from bench import workload  # noqa: F401 - registers the agents in the worker
from bench.floor import PAYLOAD


def create_tables(jobs: int) -> None:
    """Fresh tables: one cursor row per job, so concurrent tasks never wait on each other."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_bare_log, bench_bare_cursor")
        cursor.execute("CREATE TABLE bench_bare_cursor (id integer PRIMARY KEY, "
                       "step integer NOT NULL)")
        cursor.execute("CREATE TABLE bench_bare_log (id bigserial PRIMARY KEY, cursor_id integer "
                       "NOT NULL, payload jsonb NOT NULL, "
                       "created_at timestamptz NOT NULL DEFAULT clock_timestamp())")
        cursor.execute("INSERT INTO bench_bare_cursor SELECT g, 0 FROM generate_series(1, %s) g",
                       [jobs])


@shared_task(name="bench.bare_step", ignore_result=True)
def bare_step(job: int, steps: int = 1) -> None:
    """``steps`` durable steps: each appends a record and moves the job's cursor, in a
    transaction of its own (one, the issue's baseline; three, as many as a turn of model, tool,
    model commits)."""
    for _ in range(steps):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("INSERT INTO bench_bare_log (cursor_id, payload) VALUES (%s, %s)",
                           [job, PAYLOAD])
            cursor.execute("UPDATE bench_bare_cursor SET step = step + 1 WHERE id = %s", [job])
