"""Peers side by side: the floor, LangGraph, DBOS and turnkit-django on one PostgreSQL.

Run with ``make bench-peers``: it creates .venv-peers (bench/peers-requirements.txt, pinned),
starts a throwaway PostgreSQL with pg_stat_statements and runs this coordinator there. Each
system runs workload T (model, tool, model, tool, model with an instant fake model) in a process
of its own (``bench/peer_runner.py``: the peers in .venv-peers, turnkit-django in the project's
.venv) on a database of its own, so the server's counters tell them apart:

* floor: psycopg, one transaction per step (INSERT + UPDATE);
* LangGraph: ``StateGraph`` of a model node and a tool node compiled with ``PostgresSaver``,
  ``invoke(..., durability="sync")`` (each super-step's checkpoint written before the next);
* DBOS Transact: a ``@DBOS.workflow`` of five ``@DBOS.step`` calls, system database on
  PostgreSQL;
* turnkit-django inline (``agent.run``) and background (``submit`` + ``services.run_turn``).

The timing is one interleaved run: every round runs one turn of each system, in an order that
rotates. Then each system alone: two blocks of turns (after a CHECKPOINT, then steady) for
statements, commits and WAL per turn (bench/pgstats.py). Writes ``build/bench/peers.json`` and
prints a markdown table. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import pgstats, render
from bench.common import REPO, process_cpu, save, summary
from bench.floor import STEPS_PER_TURN

#: name: (label, database, tables of its own, runs in the project's .venv)
SYSTEMS: dict[str, tuple[str, str, str, bool]] = {
    "floor": ("floor: psycopg, one transaction per step (INSERT + UPDATE)", "bench_floor",
              "bench_floor_", False),
    "langgraph": ("LangGraph + PostgresSaver (durability=sync)", "bench_langgraph", "checkpoint",
                  False),
    "dbos": ("DBOS Transact (5 steps in a workflow)", "bench_dbos", "", False),
    "turnkit-inline": ("turnkit-django inline (`agent.run`)", "bench_turnkit_inline",
                       "turnkit_", True),
    "turnkit-background": ("turnkit-django background (`submit` + `run_turn`)",
                           "bench_turnkit_background", "turnkit_", True),
}


class Runner:
    """One ``bench/peer_runner.py`` process."""

    def __init__(self, system: str, python: str, url: str) -> None:
        self.system = system
        log = (REPO / "build" / "bench" / f"peer-{system}.log").open("ab")
        self.proc = subprocess.Popen(
            [python, str(REPO / "bench" / "peer_runner.py"), system, url], cwd=REPO,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log, text=True,
            env={**os.environ, "PYTHONPATH": str(REPO)})
        self.read()  # {"ready": ...}

    def read(self) -> dict[str, Any]:
        assert self.proc.stdout is not None
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.system} exited with {self.proc.wait()}; see "
                             f"build/bench/peer-{self.system}.log")
        return dict(json.loads(line))

    def call(self, op: str, **args: Any) -> dict[str, Any]:
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps({"op": op, **args}) + "\n")
        self.proc.stdin.flush()
        return self.read()

    def turns(self, n: int) -> dict[str, Any]:
        return self.call("turns", n=n)

    def close(self) -> None:
        assert self.proc.stdin is not None
        try:
            self.proc.stdin.write(json.dumps({"op": "quit"}) + "\n")
            self.proc.stdin.close()
            self.proc.wait(timeout=30)
        except (OSError, subprocess.TimeoutExpired):
            self.proc.kill()
            self.proc.wait()


def per_step(seconds: list[float | None], steps: int) -> float | None:
    known = [s for s in seconds if s is not None]
    return sum(known) * 1000 / steps if len(known) == len(seconds) else None


def backend_cpu(observer: pgstats.Observer, database: str) -> float | None:
    """CPU seconds so far of the server processes connected to ``database``."""
    pids = [pid for (pid,) in observer.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = %s", [database])]
    return process_cpu(pids)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--turnkit-python", default=str(REPO / ".venv" / "bin" / "python"))
    parser.add_argument("--only", nargs="*", choices=list(SYSTEMS), default=list(SYSTEMS))
    args = parser.parse_args()
    rounds = int(os.environ.get("BENCH_ROUNDS", "40"))
    stats_turns = int(os.environ.get("BENCH_STATS_TURNS", "20"))
    url = os.environ["TURNKIT_BENCH_DATABASE_URL"]
    (REPO / "build" / "bench").mkdir(parents=True, exist_ok=True)
    observer = pgstats.Observer(url)
    names = ["floor", *[n for n in args.only if n != "floor"]]
    runners: dict[str, Runner] = {}
    try:
        for name in names:
            _, database, _, ours = SYSTEMS[name]
            db_url = observer.create_database(database)
            python = args.turnkit_python if ours else sys.executable
            print(f"  starting {name}", flush=True)
            runners[name] = Runner(name, python, db_url)
            runners[name].turns(3)  # warm up
        samples: dict[str, list[float]] = {name: [] for name in names}
        cpu = dict.fromkeys(names, 0.0)
        backends: dict[str, list[float | None]] = {name: [] for name in names}
        for index in range(rounds):
            shift = index % len(names)
            for name in names[shift:] + names[:shift]:
                before = backend_cpu(observer, SYSTEMS[name][1])
                reply = runners[name].turns(1)
                after = backend_cpu(observer, SYSTEMS[name][1])
                samples[name] += [ms / STEPS_PER_TURN for ms in reply["ms"]]
                cpu[name] += reply["cpu_ms"]
                backends[name].append(None if before is None or after is None
                                      else after - before)
        steps = rounds * STEPS_PER_TURN
        times = {name: {**summary(s), "cpu_ms": cpu[name] / steps,
                        "server_cpu_ms": per_step(backends[name], steps)}
                 for name, s in samples.items()}
        floor_ms = times["floor"]["median"]
        results: dict[str, Any] = {}
        for name in names:
            label, database, prefix, _ = SYSTEMS[name]
            runner = runners[name]
            counts = pgstats.per_turn(
                observer, database, pgstats.with_database(url, database), prefix,
                lambda runner=runner: runner.turns(stats_turns),  # type: ignore[misc]
                [lambda runner=runner: int(runner.call("flush")["xacts"])], stats_turns,
                STEPS_PER_TURN)
            results[name] = {"label": label, **times[name],
                             "ratio": times[name]["median"] / floor_ms, "server": counts,
                             "versions": runner.call("info")["info"]}
            print(f"  measured {name}", flush=True)
        data = {"rounds": rounds, "stats_turns": stats_turns, "settings": observer.settings(),
                "systems": results}
    finally:
        for runner in runners.values():
            runner.close()
        observer.close()
    save("peers", data)
    print(render.peers(data))


if __name__ == "__main__":
    main()
