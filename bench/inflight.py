"""Many live turns per worker: one ``celery worker --pool threads`` process, Django's connection
pool capped at 20 sessions, N background turns of model (2 s), tool, model (2 s) queued at once.

Run with ``make bench`` (throwaway PostgreSQL and Redis). Everything is queued before the worker
starts; the time is from the worker's start to the last turn's completion (this process's
monotonic clock, polled every 0.1 s), so it includes the worker's start-up. Sampled meanwhile:
the sessions the worker holds (``pg_stat_activity``, by the worker's role) and, at the end, the
worker's peak resident memory (``VmHWM``). Without a turn handing its session back before each
wait (store.sessions), 20 sessions would run about five turns a second.

Writes ``build/bench/inflight.json`` and prints a markdown table. Nothing is asserted.
Knobs: BENCH_INFLIGHT_TURNS (default "1000,5000"), BENCH_INFLIGHT_CONCURRENCY (1000),
BENCH_INFLIGHT_POOL (20), BENCH_INFLIGHT_MODEL_SECONDS (2, read by bench/workload.py).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from django.core.management import call_command

from bench import render
from bench.common import OUT, save
from bench.throughput import WORKER_ROLE, Bench, Worker, scalar
from bench.workload import LIVE, LIVE_MODEL_SECONDS
from turnkit_django.models import Turn


class Sessions(threading.Thread):
    """The most sessions the worker's role held at once, sampled every 50 ms."""

    def __init__(self, bench: Bench) -> None:
        super().__init__(daemon=True)
        self.bench, self.peak, self.stopped = bench, 0, threading.Event()

    def run(self) -> None:
        while not self.stopped.wait(0.05):
            count = int(self.bench.observer.scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE usename = %s", [WORKER_ROLE]))
            self.peak = max(self.peak, count)


def peak_rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def block(bench: Bench, turns: int, concurrency: int, pool: int) -> dict[str, Any]:
    bench.leftover()
    ids = [LIVE.submit(f"Live turn {i}").id for i in range(turns)]
    sessions = Sessions(bench)
    sessions.start()
    started = time.monotonic()
    worker = Worker(concurrency, bench.url, OUT / f"worker-inflight-{turns}.log", pool="threads",
                    env={"BENCH_POOL_MAX_SIZE": str(pool)})
    finished = Turn.objects.filter(pk__in=ids, status__in=["completed", "failed", "cancelled"])
    rss = None
    try:
        while finished.count() < turns:
            worker.check()
            if time.monotonic() - started > 900:
                raise SystemExit(f"timed out after 900 s waiting for {turns} turns")
            rss = peak_rss_mb(worker.proc.pid) or rss
            time.sleep(0.1)
        seconds = time.monotonic() - started
        rss = peak_rss_mb(worker.proc.pid) or rss
    finally:
        sessions.stopped.set()
        sessions.join()
        worker.stop()
    completed = Turn.objects.filter(pk__in=ids, status="completed").count()
    recovered = Turn.objects.filter(pk__in=ids, recovery_attempts__gt=0).count()
    ran = scalar("SELECT extract(epoch FROM max(completed_at) - min(started_at)) "
                 "FROM turnkit_turn WHERE id = ANY(%s)", [ids])
    return {"turns": turns, "concurrency": concurrency, "pool": pool, "seconds": seconds,
            "ran_seconds": float(ran or 0), "completed": completed, "recovered": recovered,
            "peak_sessions": sessions.peak, "peak_rss_mb": rss, "left": bench.leftover()}


def main() -> None:
    sizes = [int(n) for n in os.environ.get("BENCH_INFLIGHT_TURNS", "1000,5000").split(",")]
    concurrency = int(os.environ.get("BENCH_INFLIGHT_CONCURRENCY", "1000"))
    pool = int(os.environ.get("BENCH_INFLIGHT_POOL", "20"))
    call_command("migrate", verbosity=0)
    OUT.mkdir(parents=True, exist_ok=True)
    bench = Bench(max(sizes))
    blocks = []
    for turns in sizes:
        blocks.append(block(bench, turns, concurrency, pool))
        last = blocks[-1]
        print(f"  {turns} turns: {last['seconds']:.1f} s, {last['completed']} completed, "
              f"peak {last['peak_sessions']} sessions, {last['peak_rss_mb']} MB", flush=True)
    bench.observer.close()
    data = {"model_seconds": LIVE_MODEL_SECONDS, "blocks": blocks}
    save("inflight", data)
    print(render.inflight(data))


if __name__ == "__main__":
    main()
