"""History: what the reads of live rows cost once a database holds a long history.

Run with ``bash scripts/bench.sh history`` (throwaway PostgreSQL; not in ``make bench``: the
generation takes minutes). SQL (``INSERT ... SELECT generate_series``, not the API) writes
``BENCH_HISTORY_ACTIVE`` (10,000) active background turns, each in a conversation of its own:
pending, running (with a fresh lease and a running tool execution) and waiting (for a pending
turn), with two messages and two events each, and ``BENCH_HISTORY_BASE_FINISHED`` (1,000)
finished turns, so that a prune batch has 100 conversations to delete in both measurements.
The operations below are measured; then
``BENCH_HISTORY_TURNS`` (1,000,000) finished turns are added in batches (two per conversation,
created over the weeks before; three messages, two events and one tool execution each; no lease),
the tables are vacuumed and analyzed, and the same operations are measured again:

* the admin's turn, conversation and tool-execution lists: a staff user's GET of the changelist
  through ``django.test.Client`` (wall ms);
* ``reconcile()``'s expired-lease query (``TurnQuerySet.lease_expired``, server time) and one
  ``reconcile()`` pass (wall ms, in a transaction rolled back: it touches lane heads);
* prune: ``delete_prunable(dry_run=True)`` of one batch of 100 candidates, and one real batch
  of 100 in a transaction rolled back (wall ms);
* ``run.events()`` of one active turn (wall ms).

Each is the median of ``BENCH_HISTORY_REPS`` (7) repetitions after a warm-up. For each, the
statements it sent are replayed under ``EXPLAIN (ANALYZE, FORMAT JSON)`` in one transaction
rolled back (the same order, so deletes see what they saw), as many times; the statement of
the highest median 'Execution Time' is the heaviest, and its text plan is kept.

Writes ``build/bench/history.json`` and prints a markdown table. Nothing is asserted.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import django

django.setup()

from django.contrib.auth import get_user_model  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402
from django.test import Client  # noqa: E402
from django.test.utils import setup_test_environment  # noqa: E402
from django.utils import timezone  # noqa: E402

import bench.workload  # noqa: E402, F401  (registers the agents the rows name)
from bench import render  # noqa: E402
from bench.common import save  # noqa: E402
from bench.history_sql import ACTIVE_SQL, FINISHED_SQL, TABLES  # noqa: E402
from turnkit_django import reconcile  # noqa: E402
from turnkit_django.api.handles import load_run  # noqa: E402
from turnkit_django.conf import turnkit_settings  # noqa: E402
from turnkit_django.models import Turn  # noqa: E402
from turnkit_django.store.locks import database_now  # noqa: E402
from turnkit_django.store.retention import delete_prunable  # noqa: E402

REPS = int(os.environ.get("BENCH_HISTORY_REPS", "7"))
ACTIVE = int(os.environ.get("BENCH_HISTORY_ACTIVE", "10000"))
FINISHED = int(os.environ.get("BENCH_HISTORY_TURNS", "1000000"))
BATCH = int(os.environ.get("BENCH_HISTORY_BATCH", "100000"))
# Finished turns already there with the active ones, so that a prune batch has something to
# delete in both measurements (the newest of the history: prune takes the oldest first).
BASE = int(os.environ.get("BENCH_HISTORY_BASE_FINISHED", "1000"))
PRUNE_BATCH = 100
EXPLAINABLE = ("SELECT", "WITH", "INSERT", "UPDATE", "DELETE")


def generate(sql: str, lo: int, hi: int) -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("SET LOCAL synchronous_commit = off")
        for statement in sql.split(";\n"):
            if statement.strip():
                cursor.execute(statement, {"lo": lo, "hi": hi, "n": FINISHED})


def vacuum() -> None:
    with connection.cursor() as cursor:
        for table in TABLES:
            cursor.execute(f"VACUUM ANALYZE {table}")


def explain(sqls: list[str]) -> list[float]:
    """Each statement's server time (ms), replayed in order in a transaction rolled back."""
    times = []
    with transaction.atomic(), connection.cursor() as cursor:
        for sql in sqls:
            cursor.execute("EXPLAIN (ANALYZE, FORMAT JSON) " + sql)
            times.append(float(_json(cursor.fetchone()[0])[0]["Execution Time"]))
        transaction.set_rollback(True)
    return times


def text_plan(sqls: list[str], index: int) -> str:
    with transaction.atomic(), connection.cursor() as cursor:
        for sql in sqls[:index]:
            cursor.execute("EXPLAIN ANALYZE " + sql)
        cursor.execute("EXPLAIN (ANALYZE, BUFFERS) " + sqls[index])
        plan = "\n".join(row[0] for row in cursor.fetchall())
        transaction.set_rollback(True)
    return plan


def _json(value: Any) -> Any:
    import json

    return json.loads(value) if isinstance(value, str) else value


def measure(name: str, call: Callable[[], Any], *, server_sql: list[str] | None = None
            ) -> dict[str, Any]:
    """Median wall ms of ``call`` and the heaviest statement it sent (or of ``server_sql``)."""
    call()  # warm-up
    walls = []
    for _ in range(REPS):
        sent: list[str] = []
        with connection.execute_wrapper(_recorder(sent)):
            start = time.perf_counter()
            call()
            walls.append((time.perf_counter() - start) * 1000)
    statements = len(sent)
    sqls = server_sql or [sql for sql in sent if sql.lstrip().upper().startswith(EXPLAINABLE)]
    runs = [explain(sqls) for _ in range(REPS)] if sqls else []
    medians = [statistics.median(r[i] for r in runs) for i in range(len(sqls))]
    worst = max(range(len(sqls)), key=medians.__getitem__) if sqls else None
    return {"name": name, "wall_ms": statistics.median(walls),
            "statements": statements,
            "server_ms": medians[worst] if worst is not None else None,
            "heaviest": sqls[worst] if worst is not None else "",
            "plan": text_plan(sqls, worst) if worst is not None else ""}


def _recorder(sent: list[str]) -> Callable[..., Any]:
    """An execute wrapper keeping each statement with its parameters bound (not executemany)."""
    def record(execute: Callable[..., Any], sql: str, params: Any, many: bool,
               context: dict[str, Any]) -> Any:
        if not many:
            sent.append(connection.ops.compose_sql(sql, params) if params else sql)
        return execute(sql, params, many, context)
    return record


def rolled_back(call: Callable[[], Any]) -> Callable[[], Any]:
    def run() -> Any:
        with transaction.atomic():
            result = call()
            transaction.set_rollback(True)
        return result
    return run


def operations(client: Client) -> list[dict[str, Any]]:
    def page(url: str) -> Callable[[], None]:
        def get() -> None:
            response = client.get(url)
            if response.status_code != 200:
                raise SystemExit(f"GET {url}: {response.status_code}")
        return get

    with connection.cursor() as cursor:  # the workers' heartbeats
        cursor.execute("UPDATE turnkit_lease SET heartbeat_at = now()")
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    expired = Turn.objects.lease_expired(cutoff).values_list("pk", flat=True)[:batch]
    sql, params = expired.query.sql_with_params()
    lease_sql = connection.ops.compose_sql(sql, params)
    before = timezone.now() - timedelta(hours=6)
    run = load_run(Turn.objects.filter(status="waiting").order_by("-created_at")
                   .values_list("pk", flat=True)[0])
    return [
        measure("admin turn list", page("/admin/turnkit/turn/")),
        measure("admin conversation list", page("/admin/turnkit/conversation/")),
        measure("admin tool-execution list", page("/admin/turnkit/toolexecution/")),
        measure("reconcile() expired-lease query", lambda: list(expired.all()),
                server_sql=[lease_sql]),
        measure("reconcile() pass", rolled_back(reconcile)),
        measure("prune dry run (one batch of 100)",
                lambda: delete_prunable(before, PRUNE_BATCH, dry_run=True)),
        measure("prune one batch of 100 (rolled back)",
                rolled_back(lambda: delete_prunable(before, PRUNE_BATCH))),
        measure("run.events() of an active turn", lambda: list(run.events())),
    ]


def counts() -> dict[str, int]:
    with connection.cursor() as cursor:
        out = {}
        for table in TABLES:
            cursor.execute(f"SELECT count(*) FROM {table}")  # noqa: S608
            out[table.removeprefix("turnkit_")] = cursor.fetchone()[0]
    return out


def main() -> None:
    if connection.vendor != "postgresql":
        raise SystemExit("the history benchmark needs PostgreSQL (scripts/bench.sh history)")
    call_command("migrate", verbosity=0)
    setup_test_environment()
    user = get_user_model().objects.create_superuser("history", "h@example.com", "x")
    client = Client()
    client.force_login(user)

    start = time.perf_counter()
    generate(ACTIVE_SQL, 0, ACTIVE)
    generate(FINISHED_SQL, FINISHED, FINISHED + BASE)
    vacuum()
    active_seconds = time.perf_counter() - start
    print(f"history: {ACTIVE:,} active turns in {active_seconds:.1f} s", flush=True)
    base = operations(client)
    base_counts = counts()

    start = time.perf_counter()
    if BATCH % 2:
        raise SystemExit("BENCH_HISTORY_BATCH must be even (two turns a conversation)")
    for lo in range(0, FINISHED, BATCH):
        generate(FINISHED_SQL, lo, min(FINISHED, lo + BATCH))
        print(f"history: {min(FINISHED, lo + BATCH):,} finished turns "
              f"({time.perf_counter() - start:.0f} s)", flush=True)
    vacuum()
    finished_seconds = time.perf_counter() - start
    grown = operations(client)
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_size_pretty(pg_database_size(current_database()))")
        size = cursor.fetchone()[0]
    data = {"active": ACTIVE, "finished": FINISHED, "base_finished": BASE, "reps": REPS,
            "generate_seconds": {"active": active_seconds, "finished": finished_seconds},
            "rows": {"active": base_counts, "grown": counts()}, "database_size": size,
            "operations": [{"name": b["name"], "active": b, "grown": g}
                           for b, g in zip(base, grown, strict=True)]}
    save("history", data)
    print(render.history(data))


if __name__ == "__main__":
    main()
