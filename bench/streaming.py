"""Streaming adds no statement to a step: one inline turn streamed and not streamed (issue 38).

Run with ``bash scripts/bench.sh streaming`` (a throwaway PostgreSQL; part of ``make bench``),
or on a SQLite file with ``TURNKIT_BENCH_DATABASE_URL=sqlite:////tmp/b.sqlite3
.venv/bin/python bench/streaming.py``. Workload T (model, tool, model, tool, model) with an
instant ``FunctionClient`` whose answer is split into ``CHUNKS`` text chunks (tool calls stream
their JSON arguments as one chunk each), run inline with ``on_delta=``:

* streamed: ``TURNKIT["STREAMING"]`` True (the default): the model steps call the client's
  ``stream`` and every chunk reaches ``on_delta`` (and the in-process delta channel);
* not streamed: the same turn, the same ``on_delta``, with ``TURNKIT["STREAMING"] = False``:
  plain ``complete`` calls, no delta.

For each: the statements of one turn and of each step (client side, ``tests/stepcost.py``),
what was sent per step (BEGIN/COMMIT included), the deltas delivered per turn, and the median
time per step over interleaved rounds. Writes ``build/bench/streaming.json``; nothing is
asserted (tests/unit/test_streaming_statements.py pins the equal statements).
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

from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402
from django.test import override_settings  # noqa: E402

from bench import render  # noqa: E402
from bench.client import capture  # noqa: E402
from bench.common import interleave, save, summary  # noqa: E402
from bench.workload import STEPS_PER_TURN, USAGE, _tool_results_this_turn, probe  # noqa: E402
from tests.stepcost import TurnCost, measure  # noqa: E402
from turnkit_django import Agent, Delta, register  # noqa: E402
from turnkit_django.clients import ModelRequest  # noqa: E402
from turnkit_django.testing import FunctionClient, call, reply  # noqa: E402

STREAMED, PLAIN = "streamed", "not streamed"
CHUNKS = 12
ANSWER = "Order 42 left the warehouse on Monday and arrives on Thursday, before noon."


def _respond(request: ModelRequest) -> Any:
    done = _tool_results_this_turn(request)
    if done < 2:
        return call("probe", usage=USAGE, n=done)
    return reply(ANSWER, chunks=CHUNKS, usage=USAGE)


#: Workload T whose answer streams in CHUNKS pieces.
AGENT = register(Agent("bench-streamed", tools=[probe], client=FunctionClient(_respond),
                       max_iterations=10))


class Mode:
    """One way of running the turn; counts the deltas its last turn delivered."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self.deltas: list[Delta] = []

    def run(self, on_event: Any = None) -> None:
        self.deltas = []
        with override_settings(TURNKIT={**settings.TURNKIT, "STREAMING": self.streaming}):
            run = AGENT.run("Where is order 42?", on_event=on_event, on_delta=self.deltas.append)
        if run.status != "completed":
            raise SystemExit(f"the inline turn ended {run.status}: {run.error}")

    def turn(self) -> None:
        self.run()


def spread(counts: list[int]) -> str:
    return str(counts[0]) if min(counts) == max(counts) else f"{min(counts)}-{max(counts)}"


def counts(mode: Mode) -> dict[str, Any]:
    cost: TurnCost = measure(mode.run)
    sent = capture(mode.turn)
    return {"statements": cost.statements, "sent": sent.round_trips,
            "setup": len(cost.of("setup")[0].statements),
            "model": spread([len(s.statements) for s in cost.of("model")]),
            "tool": spread([len(s.statements) for s in cost.of("tool")]),
            "steps": [len(s.statements) for s in cost.spans if s.kind != "setup"],
            "deltas": len(mode.deltas),
            "text_deltas": sum(1 for d in mode.deltas if d.kind == "text")}


def main() -> None:
    rounds = int(os.environ.get("BENCH_ROUNDS", "40"))
    call_command("migrate", verbosity=0)
    modes = {STREAMED: Mode(True), PLAIN: Mode(False)}
    for mode in modes.values():  # warm up
        for _ in range(3):
            mode.turn()
    samples = interleave({name: mode.turn for name, mode in modes.items()}, rounds,
                         per=dict.fromkeys(modes, STEPS_PER_TURN))
    systems = {name: {**counts(mode), **summary(samples[name]["wall"]),
                      "cpu_ms": samples[name]["cpu_ms"]} for name, mode in modes.items()}
    version = (f"SQLite {connection.Database.sqlite_version}" if connection.vendor == "sqlite"
               else f"PostgreSQL {connection.pg_version // 10000}")
    data = {"vendor": connection.vendor, "version": version, "rounds": rounds,
            "chunks": CHUNKS, "systems": systems}
    save("streaming", data)
    print(render.streaming(data))


if __name__ == "__main__":
    main()
