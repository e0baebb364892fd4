"""Where a Celery worker spends its time per background turn: cProfile over the task's trace.

Not in the default bench list. Run against a throwaway PostgreSQL (and Redis, for the doorbells
the turns ring, as in ``bench/throughput.py``; without it Celery's in-memory transport)::

    source scripts/services.sh && services_start_pg && services_start_redis
    TURNKIT_BENCH_DATABASE_URL=$TURNKIT_TEST_DATABASE_URL \\
    TURNKIT_BENCH_REDIS_URL=$TURNKIT_TEST_REDIS_URL .venv/bin/python bench/profile_worker.py
    services_stop_started

It submits ``BENCH_PROFILE_TURNS`` (300) turns of workload T3 (model, tool, model: what the
throughput benchmark submits), then runs each through Celery's tracer for ``turnkit.run_turn``
as a prefork child does (``build_tracer``: the task's signals, the Django fixup's pre/post-run
hooks with ``CELERY_DB_REUSE_MAX``, the request context), in this process under cProfile, with
the worker's settings (``bench.worker_settings``: a kept database session, the Celery
dispatcher). The broker's delivery and acknowledgement (in the pool's parent) are not in it.

Prints milliseconds per turn by group (each group the inclusive time of its entry points, the
rest "other") and the top functions by cumulative and by self time. ``BENCH_PROFILE_OUT`` names
a file for the raw ``pstats`` dump.
"""

from __future__ import annotations

import cProfile
import os
import pstats
import signal
import sys
import time
import uuid
from collections import Counter
from pathlib import Path
from typing import Any

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.worker_settings"
os.environ.setdefault("TURNKIT_BENCH_REDIS_URL", "memory://")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import django

django.setup()

from celery.app.trace import build_tracer  # noqa: E402
from celery.fixups.django import DjangoWorkerFixup  # noqa: E402
from django.core.management import call_command  # noqa: E402

from bench.celery_app import QUEUE, app  # noqa: E402
from bench.workload import T3  # noqa: E402
from turnkit_django.models import Turn  # noqa: E402
from turnkit_django.tasks import _on_pool_child, run_turn  # noqa: E402

CELERY = "Celery task overhead (tracer, signals, Django fixup, task wrapper)"
CLAIM = "claim and lease (claim, heartbeat, worker identity)"
LOAD = "loading the agent and context (agent, client, tools, transcript, delta sink)"
REQUEST = "building the model request (prompt, dynamic context, compaction check)"
MODEL = "the model call (the instant fake model, its 2 delta PUBLISHes to Redis)"
TOOL = "the tool's own call (argument validation, the function)"
OBSERVE = "tracing, metrics, events, logging, failpoints"
WRITES = "the step writes (statements and the Python building them)"
FOLLOW = "after the turn: outcome, waiters, tenant doorbell, maintenance pass"
OTHER = "other"
GROUP_ORDER = [CELERY, CLAIM, LOAD, REQUEST, MODEL, TOOL, OBSERVE, WRITES, FOLLOW, OTHER]

#: (path fragment, function name or "*", group): a sample's group is that of the innermost
#: frame matching a rule of STRONG, else of the innermost frame matching one of WEAK (so a
#: claim's store statements count as the claim, an event emitted inside a step write as an
#: event, and the rest of the store's statements as step writes).
STRONG: list[tuple[str, str, str]] = [
    ("turnkit_django/observability/", "*", OBSERVE),
    ("turnkit_django/events.py", "*", OBSERVE),
    ("turnkit_django/base/failpoints.py", "*", OBSERVE),
    ("turnkit_django/runtime/context.py", "emit", OBSERVE),
    ("/logging/__init__.py", "*", OBSERVE),
    ("turnkit_django/runtime/throttling.py", "complete", MODEL),
    ("turnkit_django/runtime/tools.py", "invoke", TOOL),
    ("turnkit_django/runtime/model.py", "build_request", REQUEST),
    ("turnkit_django/runtime/dynamic_context.py", "record", REQUEST),
    ("turnkit_django/runtime/compaction.py", "auto_compact", REQUEST),
    ("turnkit_django/store/claims.py", "claim_turn", CLAIM),
    ("turnkit_django/store/claims.py", "worker_identity", CLAIM),
    ("turnkit_django/runtime/heartbeat.py", "*", CLAIM),
    ("turnkit_django/store/transcript.py", "visible_history", LOAD),
    ("turnkit_django/store/seen.py", "remember_history", LOAD),
    ("turnkit_django/store/reads.py", "loaded_last_sequence", LOAD),
    ("turnkit_django/runtime/loop.py", "context", LOAD),
    ("turnkit_django/runtime/sources.py", "offer", LOAD),
    ("turnkit_django/runtime/calls.py", "turn_tools", LOAD),
    ("turnkit_django/runtime/streaming.py", "delta_sink", LOAD),
    ("turnkit_django/runtime/delegation.py", "inherited_client", LOAD),
    ("turnkit_django/agents/", "*", LOAD),
    ("turnkit_django/services/outcomes.py", "*", FOLLOW),
    ("turnkit_django/services/recovery.py", "*", FOLLOW),
]
WEAK: list[tuple[str, str, str]] = [
    ("turnkit_django/runtime/model.py", "*", WRITES),
    ("turnkit_django/runtime/tools.py", "*", WRITES),
    ("turnkit_django/runtime/results.py", "*", WRITES),
    ("turnkit_django/runtime/output.py", "*", WRITES),
    ("turnkit_django/store/", "*", WRITES),
    ("turnkit_django/runtime/loop.py", "*", OTHER),
    ("turnkit_django/services/turns.py", "*", FOLLOW),
    ("turnkit_django/tasks.py", "*", CELERY),
    ("celery/", "*", CELERY),
    ("kombu/", "*", CELERY),
]


_codes: dict[Any, tuple[str | None, str | None, str, bool]] = {}


def _code(code: Any) -> tuple[str | None, str | None, str, bool]:
    """A code object's strong and weak group, turnkit name, and whether it is psycopg's."""
    found = _codes.get(code)
    if found is None:
        path = code.co_filename.replace(os.sep, "/")
        name = (f"{path.rsplit('turnkit_django/', 1)[1]}:{code.co_name}"
                if "turnkit_django/" in path else "")
        found = _codes[code] = (_match(STRONG, path, code.co_name),
                                _match(WEAK, path, code.co_name), name, "/psycopg/" in path)
    return found


def _match(rules: list[tuple[str, str, str]], path: str, name: str) -> str | None:
    for fragment, function, group in rules:
        if fragment in path and function in ("*", name):
            return group
    return None


def group_of(frame: Any) -> tuple[str, str]:
    """The group of a sampled stack, and the innermost turnkit function in it."""
    where, weak = "", None
    while frame is not None:
        strong, weak_here, name, _ = _code(frame.f_code)
        where = where or name
        if strong is not None:
            return strong, where
        weak = weak or weak_here
        frame = frame.f_back
    return weak or OTHER, where


def outer_of(frame: Any) -> str:
    """The innermost frame's file and function (any library's)."""
    code = frame.f_code
    return f"{code.co_filename.rsplit('/', 2)[-2:]}:{code.co_name}"


class Sampler:
    """Samples this thread's stack every ``interval`` seconds of wall time (``SIGALRM``: the
    handler runs in the main thread at the next bytecode, or when a blocking call returns)."""

    def __init__(self, interval: float = 0.0005) -> None:
        self.interval = interval
        self.groups: Counter[str] = Counter()
        self.driver: Counter[str] = Counter()
        self.where: dict[str, Counter[str]] = {}
        self.python: Counter[str] = Counter()  # outside psycopg, by innermost frame
        self.overhead = 0.0  # seconds in the handler, taken off the wall time

    def _sample(self, signum: int, frame: Any) -> None:
        entered = time.perf_counter()
        if frame is not None and frame.f_code.co_filename != __file__:  # not a nested sample
            group, where = group_of(frame)
            driver = _code(frame.f_code)[3]
            self.groups[group] += 1
            self.driver[group] += driver
            self.where.setdefault(group, Counter())[where] += 1
            if not driver:
                self.python[f"{where or '-'} < {outer_of(frame)}"] += 1
        self.overhead += time.perf_counter() - entered

    def start(self) -> None:
        signal.signal(signal.SIGALRM, self._sample)
        signal.setitimer(signal.ITIMER_REAL, self.interval, self.interval)

    def stop(self) -> None:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, signal.SIG_DFL)


def tracer() -> Any:
    DjangoWorkerFixup(app).install()
    _on_pool_child()  # as in a prefork child: the SIGTERM hand-off around each turn
    return build_tracer(run_turn.name, run_turn, app=app, hostname="profile@localhost")


def request(task_id: str, turn_id: str) -> dict[str, Any]:
    return {"id": task_id, "task": run_turn.name, "args": [turn_id], "kwargs": {},
            "delivery_info": {"exchange": "", "routing_key": QUEUE, "priority": 0,
                              "redelivered": False},
            "hostname": "profile@localhost", "is_eager": False, "reply_to": None,
            "correlation_id": task_id}


def main() -> None:
    n = int(os.environ.get("BENCH_PROFILE_TURNS", "300"))
    warm = 20
    call_command("migrate", verbosity=0)
    trace = tracer()
    ids = [T3.submit("What does the probe say?").id for _ in range(n + warm)]
    for turn_id in ids[:warm]:
        task_id = str(uuid.uuid4())
        trace(task_id, (turn_id,), {}, request(task_id, turn_id))
    sampler = Sampler()
    half = warm + n // 2
    started, cpu = time.perf_counter(), time.process_time()
    sampler.start()
    for turn_id in ids[warm:half]:
        task_id = str(uuid.uuid4())
        trace(task_id, (turn_id,), {}, request(task_id, turn_id))
    sampler.stop()
    sampled_ms = (time.perf_counter() - started - sampler.overhead) / (half - warm) * 1000
    cpu_ms = (time.process_time() - cpu - sampler.overhead) / (half - warm) * 1000
    profile = cProfile.Profile()
    started = time.perf_counter()
    for turn_id in ids[half:]:
        task_id = str(uuid.uuid4())
        profile.enable()
        trace(task_id, (turn_id,), {}, request(task_id, turn_id))
        profile.disable()
    profiled_ms = (time.perf_counter() - started) / (len(ids) - half) * 1000
    done = Turn.objects.filter(pk__in=ids, status="completed").count()
    if done != len(ids):
        raise SystemExit(f"{len(ids) - done} of {len(ids)} turns did not complete")
    if os.environ.get("BENCH_PROFILE_OUT"):
        profile.dump_stats(os.environ["BENCH_PROFILE_OUT"])
    stats = pstats.Stats(profile)
    total = sum(sampler.groups.values())
    print(f"{half - warm} turns sampled ({total} samples): {sampled_ms:.2f} ms a turn (wall), "
          f"{cpu_ms:.2f} ms of this process's CPU\n")
    print("| per background turn | ms | of which in psycopg | share |\n|---|---:|---:|---:|")
    for group in GROUP_ORDER:
        share, driver = sampler.groups[group] / total, sampler.driver[group] / total
        print(f"| {group} | {share * sampled_ms:.2f} | {driver * sampled_ms:.2f} | "
              f"{share:.0%} |")
    driver = sum(sampler.driver.values()) / total
    print(f"| total | {sampled_ms:.2f} | {driver * sampled_ms:.2f} | 100% |\n")
    for group in GROUP_ORDER:
        top = ", ".join(f"{where or '-'} {count / total * sampled_ms:.2f}"
                        for where, count in sampler.where.get(group, Counter()).most_common(6))
        print(f"{group}: {top}")
    print("\noutside psycopg, by innermost turnkit function < innermost function (ms a turn):")
    for where, count in sampler.python.most_common(30):
        print(f"  {count / total * sampled_ms:.3f} {where}")
    print(f"\n{len(ids) - half} turns under cProfile: {profiled_ms:.2f} ms a turn (wall)")
    stats.sort_stats("cumulative").print_stats(60)
    stats.sort_stats("tottime").print_stats(40)


if __name__ == "__main__":
    main()
