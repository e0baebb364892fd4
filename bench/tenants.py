"""Fairness between tenants: one tenant's burst against another tenant's single turn.

Run with ``scripts/bench.sh tenants`` (throwaway PostgreSQL and Redis; not part of the default
``make bench``: it takes about four minutes). One ``celery worker --pool threads`` process (more
threads than the tenant limit, Django's connection pool), ``TENANT_LIMITS`` concurrency 20, and
turns of one model call (2 s) and a reply; this process reconciles every ``RECONCILE_INTERVAL``
as beat would. First the *latency bound*: a turn submitted alone, from its submission to its
completion (the median of three, after one that warms the worker up). Then tenant ``a`` submits
2,000 turns, and tenant ``b`` one: ``b``'s submission-to-completion time is reported against
the bound, with how many of ``a``'s turns were still pending when ``b`` submitted, how many of
them completed before ``b``'s, the most of ``a``'s turns running at once (sampled every 50 ms)
and the time ``a``'s burst took to drain. Times are the database's (``submitted_at``,
``completed_at``).

Writes ``build/bench/tenants.json`` and prints a markdown table. Nothing is asserted.
Knobs: BENCH_TENANTS_TURNS (2000), BENCH_TENANTS_CONCURRENCY (20), BENCH_TENANTS_THREADS (100),
BENCH_TENANTS_POOL (20), BENCH_TENANTS_MODEL_SECONDS (2, read by bench/workload.py),
BENCH_TENANTS_DRAIN (1: wait for the whole burst; 0: stop once ``b``'s turn completed).
"""

from __future__ import annotations

import os
import statistics
import sys
import threading
import time
from pathlib import Path

os.environ.setdefault("BENCH_TENANT_CONCURRENCY",
                      os.environ.get("BENCH_TENANTS_CONCURRENCY", "20"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from django.core.management import call_command
from django.db import connection

from bench import render
from bench.common import OUT, save
from bench.throughput import TERMINAL, Bench, Worker
from bench.workload import TENANT, TENANT_MODEL_SECONDS
from turnkit_django.models import Turn


class Sampler(threading.Thread):
    """The most of tenant ``a``'s turns running at once, sampled every 50 ms; and this
    process's reconcile pass every RECONCILE_INTERVAL (what beat runs in a deployment)."""

    def __init__(self) -> None:
        super().__init__(daemon=True)
        self.peak, self.stopped = 0, threading.Event()
        self.errors: list[BaseException] = []

    def run(self) -> None:
        from turnkit_django import reconcile
        from turnkit_django.conf import turnkit_settings

        interval = float(turnkit_settings.RECONCILE_INTERVAL)
        last = time.monotonic()
        try:
            while not self.stopped.wait(0.05):
                self.peak = max(self.peak, Turn.objects.tenant_running("a").count())
                if time.monotonic() - last >= interval:
                    last = time.monotonic()
                    try:
                        reconcile()
                    except Exception as exc:  # reported at the end
                        self.errors.append(exc)
        finally:
            connection.close()


def wait(ids: list[str], worker: Worker, *, timeout: float, what: str) -> None:
    finished = Turn.objects.filter(pk__in=ids, status__in=TERMINAL)
    deadline = time.monotonic() + timeout
    while finished.count() < len(ids):
        worker.check()
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.02)


def latency(turn_id: str) -> float:
    """Seconds from the turn's submission to its completion, by the database clock."""
    turn = Turn.objects.get(pk=turn_id)
    assert turn.completed_at is not None and turn.submitted_at is not None, turn.status
    return (turn.completed_at - turn.submitted_at).total_seconds()


def alone(worker: Worker, label: str) -> float:
    run = TENANT.submit(f"Alone {label}", principal={"tenant": f"solo-{label}"})
    wait([run.id], worker, timeout=300, what=f"the single turn {label}")
    return latency(run.id)


def main() -> None:
    turns = int(os.environ.get("BENCH_TENANTS_TURNS", "2000"))
    limit = int(os.environ["BENCH_TENANT_CONCURRENCY"])
    threads = int(os.environ.get("BENCH_TENANTS_THREADS", "100"))
    pool = int(os.environ.get("BENCH_TENANTS_POOL", "20"))
    drain = os.environ.get("BENCH_TENANTS_DRAIN", "1") != "0"
    call_command("migrate", verbosity=0)
    OUT.mkdir(parents=True, exist_ok=True)
    bench = Bench(turns)
    bench.leftover()
    worker = Worker(threads, bench.url, OUT / "worker-tenants.log", pool="threads",
                    env={"BENCH_POOL_MAX_SIZE": str(pool)})
    sampler = Sampler()
    try:
        alone(worker, "warm-up")  # includes the worker's start-up
        bound = statistics.median(alone(worker, str(i)) for i in range(3))
        print(f"  latency bound (one turn alone): {bound:.2f} s", flush=True)
        sampler.start()
        started = time.monotonic()
        burst = [TENANT.submit(f"Burst {i}", principal={"tenant": "a"}).id
                 for i in range(turns)]
        submit_seconds = time.monotonic() - started
        other = TENANT.submit("The other tenant's turn", principal={"tenant": "b"}).id
        pending = Turn.objects.filter(pk__in=burst, status="pending").count()
        wait([other], worker, timeout=900, what="tenant b's turn")
        b = Turn.objects.get(pk=other)
        before_b = Turn.objects.filter(pk__in=burst, completed_at__lt=b.completed_at).count()
        print(f"  tenant b: {latency(other):.2f} s, {pending} of a's turns pending at its "
              "submission", flush=True)
        if drain:
            wait(burst, worker, timeout=3600, what=f"tenant a's {turns} turns")
    finally:
        sampler.stopped.set()
        if sampler.is_alive():
            sampler.join()
        worker.stop()
    rows = Turn.objects.filter(pk__in=burst)
    first = min(r.submitted_at for r in rows if r.submitted_at)
    done = [r.completed_at for r in rows if r.completed_at]
    data = {"turns": turns, "concurrency": limit, "threads": threads, "pool": pool,
            "model_seconds": TENANT_MODEL_SECONDS, "bound_seconds": bound,
            "b_seconds": latency(other), "b_status": str(b.status),
            "a_submit_seconds": submit_seconds, "a_pending_at_b": pending,
            "a_completed_before_b": before_b, "a_peak_running": sampler.peak,
            "a_completed": rows.filter(status="completed").count(), "drained": drain,
            "a_drain_seconds": (max(done) - first).total_seconds() if drain and done else None,
            "reconcile_errors": [repr(e) for e in sampler.errors], "left": bench.leftover()}
    bench.observer.close()
    save("tenants", data)
    print(render.tenants(data))


if __name__ == "__main__":
    main()
