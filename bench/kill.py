"""SIGKILL of a threads worker holding many live turns: another worker finishes every one.

Run with ``bash scripts/bench.sh kill`` (throwaway PostgreSQL and Redis). One ``celery worker
--pool threads`` process (the in-flight benchmark's: bench/inflight.py, Django's connection pool
capped at 20 sessions) takes N background turns of model (2 s), a tool that is not replay-safe,
model (2 s) (``bench.workload.KILL``). Once the share ``BENCH_KILL_AT`` (1.0) of the turns have
requested model call ``BENCH_KILL_STEP`` (0, the first: the moment the worker holds the most
turns at once), the worker's process group gets SIGKILL; a second
worker of the same kind starts, and this process runs ``reconcile()`` every
``RECONCILE_INTERVAL`` as a beat would. Leases are shortened to ``BENCH_LEASE`` seconds (10;
heartbeat ``BENCH_HEARTBEAT``, 2), as the e2e tier shortens them for its SIGKILL test.

Reported: the turns held at the kill (started and not finished), those of them in a model call
whose response was not committed (live), the
time from the kill (and from the second worker's start) to the last turn's completion, the
recovered turns, and the checks: the invariant checker (``turnkit_django.testing.verify``, as
``turnkit_verify`` runs it) on the turns' conversations, and from the ledger the workers append
to (``bench.workload.record``: every model request and every effect of the tool): tools not
replay-safe run twice, and model responses committed before the kill requested again.

Writes ``build/bench/kill.json`` and prints a markdown table. Nothing is asserted.
Knobs: BENCH_KILL_TURNS (1000), BENCH_KILL_AT (1.0), BENCH_KILL_STEP (0),
BENCH_INFLIGHT_CONCURRENCY (1000), BENCH_INFLIGHT_POOL (20), BENCH_LEASE (10), BENCH_HEARTBEAT (2).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import time
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.common import OUT

# Read by bench/worker_settings.py and bench/workload.py, in this process and the workers.
os.environ.setdefault("BENCH_LEASE", "10")
os.environ.setdefault("BENCH_HEARTBEAT", "2")
os.environ["BENCH_KILL_LEDGER"] = str(OUT / "kill-ledger.jsonl")

from django.core.management import call_command
from django.db.models import Count

from bench import render
from bench.common import save
from bench.inflight import Sessions, peak_rss_mb
from bench.throughput import TERMINAL, Bench, Worker
from bench.workload import KILL, KILL_LEDGER, LIVE_MODEL_SECONDS
from turnkit_django import reconcile
from turnkit_django.conf import turnkit_settings
from turnkit_django.models import Message, ToolExecution, Turn
from turnkit_django.testing.verify import verify

TIMEOUT = 900


def ledger() -> list[dict[str, Any]]:
    path = Path(KILL_LEDGER)
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def committed_steps(ids: list[str]) -> Counter[str]:
    """Model responses committed per turn: its assistant messages."""
    rows = (Message.objects.filter(turn_id__in=ids, role="assistant").values("turn_id")
            .annotate(n=Count("pk")).values_list("turn_id", "n"))
    return Counter(dict(rows))


def run(turns: int, concurrency: int, pool: int, kill_at: float, step: int) -> dict[str, Any]:
    bench = Bench(turns)
    bench.leftover()
    Path(KILL_LEDGER).unlink(missing_ok=True)
    ids = [KILL.submit(f"Kill turn {i}").id for i in range(turns)]
    sessions = Sessions(bench)
    sessions.start()
    env = {"BENCH_POOL_MAX_SIZE": str(pool)}
    started = time.monotonic()
    first = Worker(concurrency, bench.url, OUT / "worker-kill-1.log", pool="threads", env=env)
    finished = Turn.objects.filter(pk__in=ids, status__in=TERMINAL)
    second = None
    try:
        rss, want = None, kill_at * turns
        while sum(1 for e in ledger() if e["ev"] == "model" and e["step"] == step) < want:
            first.check()
            if time.monotonic() - started > TIMEOUT:
                raise SystemExit(f"timed out after {TIMEOUT} s before the kill")
            rss = peak_rss_mb(first.proc.pid) or rss
            time.sleep(0.05)
        rss = peak_rss_mb(first.proc.pid) or rss
        os.killpg(first.proc.pid, signal.SIGKILL)
        first.proc.wait(timeout=30)
        killed = time.monotonic()
        # The killed process writes nothing more: what it committed is what the database holds.
        committed = committed_steps(ids)
        at_kill = ledger()
        completed_at_kill = finished.count()
        live = {(e["turn"], e["step"]) for e in at_kill
                if e["ev"] == "model" and e["step"] >= committed[e["turn"]]}
        started_at_kill = {e["turn"] for e in at_kill if e["ev"] == "model"}
        second = Worker(concurrency, bench.url, OUT / "worker-kill-2.log", pool="threads",
                        env=env)
        second_started = time.monotonic()
        passes = 0
        while finished.count() < turns:
            second.check()
            if time.monotonic() - killed > TIMEOUT:
                raise SystemExit(f"timed out after {TIMEOUT} s after the kill")
            reconcile()  # what a beat entry would run
            passes += 1
            time.sleep(float(turnkit_settings.RECONCILE_INTERVAL))
        done = time.monotonic()
    finally:
        sessions.stopped.set()
        sessions.join()
        if second is not None:
            second.stop()
        first.stop()
    entries = ledger()
    effects = Counter((e["turn"], e["call"]) for e in entries if e["ev"] == "effect")
    requests = Counter((e["turn"], e["step"]) for e in entries if e["ev"] == "model")
    again = [e for e in entries[len(at_kill):]
             if e["ev"] == "model" and e["step"] < committed[e["turn"]]]
    report = verify(turn_ids=ids)
    result = {
        "turns": turns, "concurrency": concurrency, "pool": pool, "kill_at": kill_at,
        "kill_step": step, "held_at_kill": len(started_at_kill) - completed_at_kill,
        "lease": float(turnkit_settings.LEASE),
        "heartbeat": float(turnkit_settings.HEARTBEAT_INTERVAL),
        "seconds_to_kill": killed - started, "completed_at_kill": completed_at_kill,
        "live_at_kill": len(live), "rss_at_kill_mb": rss,
        "seconds_after_kill": done - killed, "seconds_after_second_start": done - second_started,
        "reconcile_passes": passes,
        "completed": Turn.objects.filter(pk__in=ids, status="completed").count(),
        "recovered": Turn.objects.filter(pk__in=ids, recovery_attempts__gt=0).count(),
        "peak_sessions": sessions.peak,
        "effects": sum(effects.values()),
        "unsafe_run_twice": sum(1 for n in effects.values() if n > 1),
        "turns_without_effect": turns - len({turn for turn, _ in effects}),
        "tool_statuses": dict(Counter(ToolExecution.objects.filter(turn_id__in=ids)
                                      .values_list("status", flat=True))),
        "model_requests": sum(requests.values()),
        "requested_again_after_kill": sum(1 for (t, s) in live if requests[t, s] > 1),
        "committed_requested_again": len(again),
        "verify_ok": report.ok, "verify_turns": report.turns,
        "verify_conversations": report.conversations,
        "violations": [str(v) for v in report.violations[:20]],
        "violation_count": len(report.violations), "left": bench.leftover(),
    }
    bench.observer.close()
    return result


def main() -> None:
    turns = int(os.environ.get("BENCH_KILL_TURNS", "1000"))
    kill_at = float(os.environ.get("BENCH_KILL_AT", "1.0"))
    step = int(os.environ.get("BENCH_KILL_STEP", "0"))
    concurrency = int(os.environ.get("BENCH_INFLIGHT_CONCURRENCY", "1000"))
    pool = int(os.environ.get("BENCH_INFLIGHT_POOL", "20"))
    call_command("migrate", verbosity=0)
    OUT.mkdir(parents=True, exist_ok=True)
    data = {"model_seconds": LIVE_MODEL_SECONDS, **run(turns, concurrency, pool, kill_at, step)}
    save("kill", data)
    print(render.kill(data))


if __name__ == "__main__":
    main()
