"""Per-step overhead of the durable runtime against the floor of one bare transaction per step.

Run with ``make bench`` (starts a throwaway PostgreSQL). One run measures, side by side:

* floor: one transaction per step holding an INSERT and an UPDATE (the physical minimum for a
  durable step that appends a record and advances a cursor);
* inline: a turn of five steps (model, tool, model, tool, model) with an instant scripted model,
  executed in-process;
* background: the same turn submitted and executed through the Celery task's body
  (``services.run_turn``), without broker latency.

Prints milliseconds per step and the ratios to the floor, then what one inline turn costs in SQL:
statements per model step and per tool call (split at the loop's events, see
``tests/stepcost.py``; BEGIN and COMMIT not counted), and transactions (commits) per turn. A
benchmark, not a test: nothing is asserted (tests/unit/test_step_cost.py bounds the counts).
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from collections.abc import Callable

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection, transaction  # noqa: E402

from tests.stepcost import TurnCost, measure  # noqa: E402
from turnkit_django import Agent, register, tool  # noqa: E402
from turnkit_django.services import run_turn  # noqa: E402
from turnkit_django.testing import FunctionClient, call, reply  # noqa: E402

STEPS_PER_TURN = 5  # model, tool, model, tool, model


def no_dispatch(turn_id: str) -> None:
    """The benchmark executes turns itself; nothing is sent to a broker."""


@tool
def probe(n: int) -> dict[str, int]:
    """Return its input."""
    return {"n": n}


def respond(request):  # type: ignore[no-untyped-def]
    done = sum(1 for m in request.messages if m.role == "tool")
    return call("probe", n=done) if done < 2 else reply("done")


AGENT = register(Agent("bench", tools=[probe], client=FunctionClient(respond), max_iterations=10))


def floor_setup() -> None:
    with connection.cursor() as cursor:
        cursor.execute("DROP TABLE IF EXISTS bench_floor_log, bench_floor_cursor")
        cursor.execute("CREATE TABLE bench_floor_log (id bigserial primary key, payload jsonb)")
        cursor.execute("CREATE TABLE bench_floor_cursor (id int primary key, step int)")
        cursor.execute("INSERT INTO bench_floor_cursor VALUES (1, 0)")


def floor_step() -> None:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute("INSERT INTO bench_floor_log (payload) VALUES (%s)", ['{"step": 1}'])
        cursor.execute("UPDATE bench_floor_cursor SET step = step + 1 WHERE id = 1")


def inline_turn(on_event=None) -> None:  # type: ignore[no-untyped-def]
    run = AGENT.run("bench", on_event=on_event)
    assert run.status == "completed", run.error


def background_turn() -> None:
    run = AGENT.prepare("bench").submit()
    run_turn(run.id, kind="bench")


def per_step_ms(fn: Callable[[], None], steps: int, rounds: int) -> float:
    samples = []
    for _ in range(rounds):
        start = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - start) * 1000 / steps)
    return statistics.median(samples)


def statements() -> TurnCost:
    """The SQL of one inline turn (creation included), split into its steps."""
    return measure(inline_turn)


def spread(counts: list[int]) -> str:
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "60"))
    call_command("migrate", verbosity=0)
    floor_setup()
    for fn in (floor_step, inline_turn, background_turn):  # warm up
        fn()
    floor = per_step_ms(floor_step, 1, rounds * STEPS_PER_TURN)
    inline = per_step_ms(inline_turn, STEPS_PER_TURN, rounds)
    background = per_step_ms(background_turn, STEPS_PER_TURN, rounds)
    cost = statements()
    model = [len(s.statements) for s in cost.of("model")]
    tools = [len(s.statements) for s in cost.of("tool")]
    setup = cost.of("setup")[0]
    print(f"PostgreSQL {connection.pg_version}, {rounds} rounds, median per step")
    print(f"  floor (INSERT + UPDATE, one tx) {floor:8.3f} ms   1.00x")
    print(f"  inline turn step                {inline:8.3f} ms   {inline / floor:5.2f}x")
    print(f"  background turn step            {background:8.3f} ms   {background / floor:5.2f}x")
    print(f"  SQL statements: {spread(model)} per model step, {spread(tools)} per tool call; "
          f"{cost.statements} per 5-step turn ({len(setup.statements)} to create and claim it)")
    print(f"  transactions: {cost.commits} commits per 5-step turn "
          f"({setup.commits} to create and claim it, "
          f"{sum(s.commits for s in cost.spans if s.kind != 'setup')} for its 5 steps)")


if __name__ == "__main__":
    main()
