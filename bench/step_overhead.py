"""Per-step overhead of the durable runtime against the floor of one bare transaction per step.

Run with ``make bench`` (throwaway PostgreSQL with pg_stat_statements, then a SQLite file).
One process measures one database, in one interleaved run (floor, inline, background rounds
alternate, their order rotating, so drift on a loaded machine hits all alike):

* floor: one transaction per step holding an INSERT and an UPDATE, through the bare driver
  (psycopg, or sqlite3 in IMMEDIATE mode), see ``bench/floor.py``;
* inline: workload T (model, tool, model, tool, model; an instant ``FunctionClient``),
  ``agent.run()`` in-process;
* background: the same turn submitted and executed through the Celery task's body
  (``services.run_turn``: the turn, then the lane hand-off, the wake and a maintenance pass),
  without broker latency.

Then what each costs, client side (what Django's connection sent, ``bench/client.py``; the
split of one inline turn into its steps, ``tests/stepcost.py``) and, on PostgreSQL, server side
(``bench/pgstats.py``): statements and transactions per turn from ``pg_stat_statements`` and
``pg_stat_database``, WAL bytes per turn right after a CHECKPOINT and in steady state, HOT
updates of the turn and conversation tables, index entries and index bytes added per turn.

Writes ``build/bench/steps.json`` (``sqlite.json``) and prints markdown tables. A benchmark, not
a test: nothing is asserted (tests/unit/test_step_cost.py bounds the client-side counts).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench import pgstats, render  # noqa: E402
from bench.client import ClientCost, capture  # noqa: E402
from bench.common import interleave, process_cpu, save, summary  # noqa: E402
from bench.floor import PostgresFloor, SqliteFloor  # noqa: E402
from bench.render import BACKGROUND, INLINE  # noqa: E402
from bench.workload import STEPS_PER_TURN, T5  # noqa: E402
from bench.write_path import WritePath  # noqa: E402
from tests.stepcost import TurnCost, measure  # noqa: E402
from turnkit_django.models import Turn  # noqa: E402
from turnkit_django.services import run_turn  # noqa: E402

FLOOR = "floor"
UNPREPARED = "inline, not prepared"
WRITES = "write path"
LABELS = {
    FLOOR: "floor: {driver}, one transaction per step (INSERT + UPDATE)",
    INLINE: "turnkit-django inline (`agent.run`)",
    UNPREPARED: "turnkit-django inline, statements not prepared (Django's default)",
    BACKGROUND: "turnkit-django background (`submit` + `run_turn`)",
    WRITES: f"{render.WRITE_PATH} (an inline turn's step statements, replayed)",
}


def inline_turn(on_event: Any = None) -> None:
    run = T5.run("bench", on_event=on_event)
    if run.status != "completed":
        raise SystemExit(f"the inline turn ended {run.status}: {run.error}")


def unprepared_turn() -> None:
    """An inline turn with psycopg's prepared statements off, as Django leaves them unless
    ``OPTIONS["prepare_threshold"]`` is set (bench.settings sets it, as the docs recommend)."""
    raw = connection.connection
    saved, raw.prepare_threshold = raw.prepare_threshold, None
    try:
        inline_turn()
    finally:
        raw.prepare_threshold = saved


def background_turn() -> None:
    run = T5.submit("bench")
    run_turn(run.id, kind="bench")


def check_background() -> None:
    run = T5.submit("bench")
    run_turn(run.id, kind="bench")
    status = Turn.objects.filter(pk=run.id).values_list("status", flat=True).get()
    if status != "completed":
        raise SystemExit(f"the background turn ended {status}")


def django_backend() -> list[int]:
    """The server process behind Django's connection (PostgreSQL only)."""
    if connection.vendor != "postgresql":
        return []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return [int(cursor.fetchone()[0])]


def spread(counts: list[int]) -> str:
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def client_side(fn: Any) -> dict[str, float]:
    cost: ClientCost = capture(fn)
    return {"statements": cost.statements, "round_trips": cost.round_trips,
            "commits": cost.commits, "transactions": cost.transactions}


def split() -> dict[str, Any]:
    """One inline turn split into its steps (client side, BEGIN/COMMIT not counted)."""
    cost: TurnCost = measure(inline_turn)
    setup = cost.of("setup")[0]

    def transactions(span: Any) -> int:  # a statement in autocommit is a transaction too
        return ClientCost(span.sql).transactions

    return {"model": spread([len(s.statements) for s in cost.of("model")]),
            "tool": spread([len(s.statements) for s in cost.of("tool")]),
            "setup": len(setup.statements), "setup_commits": transactions(setup),
            "step_commits": sum(transactions(s) for s in cost.spans if s.kind != "setup")}


def server_side(observer: pgstats.Observer, database: str, url: str, prefix: str,
                turn: Any, flush_with: Any, turns: int) -> dict[str, Any]:
    def block() -> None:
        for _ in range(turns):
            turn()

    return pgstats.per_turn(observer, database, url, prefix, block, [pgstats.flusher(flush_with)],
                            turns, STEPS_PER_TURN)


def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "40"))
    stats_turns = int(os.environ.get("BENCH_STATS_TURNS", "20"))
    call_command("migrate", verbosity=0)
    vendor = connection.vendor
    observer = None
    if vendor == "postgresql":
        url = os.environ["TURNKIT_BENCH_DATABASE_URL"]
        observer = pgstats.Observer(url)
        floor_url = observer.create_database("bench_floor")
        floor: PostgresFloor | SqliteFloor = PostgresFloor(floor_url)
        driver, version = "psycopg", f"PostgreSQL {observer.settings()['server_version']}"
    elif vendor == "sqlite":
        path = str(connection.settings_dict["NAME"])
        floor = SqliteFloor(path)
        driver = "sqlite3"
        version = f"SQLite {connection.Database.sqlite_version} (file, IMMEDIATE)"
    else:
        raise SystemExit(f"no floor for {vendor}")

    systems = {FLOOR: floor.turn, INLINE: inline_turn, BACKGROUND: background_turn}
    per = dict.fromkeys(systems, STEPS_PER_TURN)
    if vendor == "postgresql":
        systems[UNPREPARED] = unprepared_turn
        # every timed, warm-up, client-side and server-side (two blocks) turn writes its own copy
        writes = WritePath(inline_turn, turns=rounds + 4 + 2 * stats_turns)
        systems[WRITES], per[UNPREPARED], per[WRITES] = writes.turn, STEPS_PER_TURN, writes.steps
    for fn in systems.values():  # warm up
        for _ in range(3):
            fn()
    check_background()
    backends = {FLOOR: [floor.backend_pid] if isinstance(floor, PostgresFloor) else [],
                INLINE: django_backend(), BACKGROUND: django_backend(),
                UNPREPARED: django_backend(), WRITES: django_backend()}
    samples = interleave(systems, rounds, per=per,
                         server_cpu={name: (lambda pids=pids: process_cpu(pids))
                                     for name, pids in backends.items() if pids})
    times = {name: {**summary(s["wall"]), "cpu_ms": s["cpu_ms"],
                    "server_cpu_ms": s["server_cpu_ms"]} for name, s in samples.items()}
    floor_ms = times[FLOOR]["median"]

    results: dict[str, Any] = {}
    for name in systems:
        results[name] = {"label": LABELS[name].format(driver=driver), **times[name],
                         "ratio": times[name]["median"] / floor_ms}
    results[INLINE]["client"] = client_side(inline_turn)
    results[BACKGROUND]["client"] = client_side(background_turn)
    if UNPREPARED in systems:
        results[UNPREPARED]["client"] = client_side(unprepared_turn)
        results[WRITES]["client"] = client_side(systems[WRITES])
    results[INLINE]["split"] = split()
    results[FLOOR]["client"] = {"statements": 2 * STEPS_PER_TURN,
                                "round_trips": 4 * STEPS_PER_TURN,
                                "commits": STEPS_PER_TURN, "transactions": STEPS_PER_TURN}
    server: dict[str, Any] = {}
    if observer is not None:
        turnkit_db = pgstats.database_of(os.environ["TURNKIT_BENCH_DATABASE_URL"])
        server["settings"] = observer.settings()
        assert isinstance(floor, PostgresFloor)
        results[FLOOR]["server"] = server_side(
            observer, "bench_floor", floor_url, "bench_floor_", floor.turn, floor.connection,
            stats_turns)
        for name, fn in ((INLINE, inline_turn), (UNPREPARED, unprepared_turn),
                         (BACKGROUND, background_turn), (WRITES, systems[WRITES])):
            results[name]["server"] = server_side(
                observer, turnkit_db, os.environ["TURNKIT_BENCH_DATABASE_URL"], "turnkit_", fn,
                connection, stats_turns)
        observer.close()
    floor.close()
    data = {"vendor": vendor, "version": version, "rounds": rounds, "stats_turns": stats_turns,
            "systems": results, **server}
    save("steps" if vendor == "postgresql" else "sqlite", data)
    print(render.steps(data))


if __name__ == "__main__":
    main()
