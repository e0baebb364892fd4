"""One system of ``make bench-peers`` in a process of its own, driven by bench/peers.py.

``python bench/peer_runner.py SYSTEM DATABASE_URL`` reads one JSON command per line on stdin and
answers one JSON line on stdout:

* ``{"op": "turns", "n": N}``: run N turns of workload T (model, tool, model, tool, model with an
  instant fake model); answers the milliseconds of each, and the CPU milliseconds of this
  process for all of them;
* ``{"op": "flush"}``: publish the statistics of its database connections (see
  bench/pgstats.py); answers the transactions that took;
* ``{"op": "info"}``: versions; ``{"op": "quit"}``.

Systems: ``floor`` (psycopg), ``langgraph`` (bench/peer_langgraph.py), ``dbos``
(bench/peer_dbos.py), and ``turnkit-inline`` / ``turnkit-background`` (``bench.workload.T5``;
run with the project's .venv, Django settings ``bench.settings``). The peers run in .venv-peers
and import nothing from Django or turnkit-django.
"""

from __future__ import annotations

import json
import os
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import pgstats
from bench.floor import STEPS_PER_TURN, PostgresFloor

TOOL_CALLS = STEPS_PER_TURN // 2  # model, tool, model, tool, model


class System:
    """A turn, and how to publish its connections' statistics."""

    def turn(self) -> None:
        raise NotImplementedError

    def flush(self) -> int:
        raise NotImplementedError

    def info(self) -> dict[str, str]:
        return {}


class Floor(System):
    def __init__(self, url: str) -> None:
        self.floor = PostgresFloor(url)

    def turn(self) -> None:
        self.floor.turn()

    def flush(self) -> int:
        return pgstats.flush(self.floor.connection)

    def info(self) -> dict[str, str]:
        return {"psycopg": version("psycopg")}


class Turnkit(System):
    def __init__(self, url: str, background: bool) -> None:
        os.environ["TURNKIT_BENCH_DATABASE_URL"] = url
        os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
        import django

        django.setup()
        from django.core.management import call_command
        from django.db import connection

        from bench.workload import T5
        from turnkit_django.services import run_turn

        call_command("migrate", verbosity=0)
        self.connection = connection

        def inline() -> None:
            assert T5.run("bench").status == "completed"

        def submitted() -> None:  # as bench/step_overhead.py: created submitted, one statement
            run = T5.submit("bench")
            run_turn(run.id, kind="bench")

        self.turn = submitted if background else inline  # type: ignore[method-assign]

    def flush(self) -> int:
        return pgstats.flush(self.connection)

    def info(self) -> dict[str, str]:
        return {"turnkit-django": version("turnkit-django"), "django": version("django"),
                "psycopg": version("psycopg")}


def make(system: str, url: str) -> System:
    if system == "floor":
        return Floor(url)
    if system == "langgraph":
        from bench.peer_langgraph import LangGraph

        return LangGraph(url)
    if system == "dbos":
        from bench.peer_dbos import Dbos

        return Dbos(url)
    if system in ("turnkit-inline", "turnkit-background"):
        return Turnkit(url, background=system == "turnkit-background")
    raise SystemExit(f"unknown system {system!r}")


def main() -> None:
    system, url = sys.argv[1], sys.argv[2]
    answer = sys.stdout
    sys.stdout = sys.stderr  # whatever the libraries print stays out of the protocol
    runner = make(system, url)
    print(json.dumps({"ready": system}), file=answer, flush=True)
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        if op == "turns":
            times = []
            cpu = time.process_time()
            for _ in range(int(command["n"])):
                start = time.perf_counter()
                runner.turn()
                times.append((time.perf_counter() - start) * 1000)
            reply: dict[str, Any] = {"ms": times, "cpu_ms": (time.process_time() - cpu) * 1000}
        elif op == "flush":
            reply = {"xacts": runner.flush()}
        elif op == "info":
            reply = {"info": runner.info()}
        elif op == "quit":
            break
        else:
            reply = {"error": f"unknown op {op!r}"}
        print(json.dumps(reply), file=answer, flush=True)


if __name__ == "__main__":
    main()
