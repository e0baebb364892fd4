"""The soak's end: drain with a deadline, every invariant, and one line of figures."""

from __future__ import annotations

import json
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from django.db import connection

from tests.e2e.harness import Cluster, Worker, hygiene_after, listening, queued, wait_for
from tests.e2e.invariants import (
    TERMINAL_EVENTS,
    input_problems,
    side_effect_problems,
    terminal_event_problems,
)
from turnkit_django.base.states import ToolStatus
from turnkit_django.models import Conversation, Delivery, Message, ToolExecution, Turn, Wait
from turnkit_django.testing.verify import check_invariants


def outstanding() -> tuple[int, int]:
    """Active turns, and deliveries not yet delivered."""
    return Turn.objects.active().count(), Delivery.objects.pending().count()


class Progress:
    """A line every ``every`` seconds in ``path``: active turns by status, pending deliveries,
    the broker's queue, the workers listening (to see a run's shape, and where it stalled)."""

    def __init__(self, path: Path, every: float = 10.0) -> None:
        self.path = path
        self.every = every
        self.started = time.monotonic()
        self._last = -every

    def log(self, note: str = "") -> None:
        now = time.monotonic() - self.started
        if now - self._last < self.every:
            return
        self._last = now
        active = Counter(Turn.objects.active().values_list("status", flat=True))
        try:
            broker = f"queued={queued()} listening={listening()}"
        except Exception as exc:  # Redis is being restarted
            broker = f"broker: {type(exc).__name__}"
        line = (f"{now:6.0f}s {note} active={dict(sorted(active.items()))} "
                f"deliveries={Delivery.objects.pending().count()} {broker}")
        with self.path.open("a") as out:
            out.write(line + "\n")


def drain(timeout: float, progress: Progress) -> float:
    """Wait until no turn is active and no delivery pending; return the seconds it took
    (``timeout`` plus one when it never drained)."""
    started = time.monotonic()

    def drained() -> bool:
        progress.log("drain")
        return outstanding() == (0, 0)

    try:
        wait_for(drained, timeout=timeout,
                 what="every turn to finish and every delivery to land", interval=0.5)
    except AssertionError:
        return timeout + 1
    return time.monotonic() - started


def stuck_turns(limit: int = 20) -> list[str]:
    """A line per turn still active (the first ``limit``), with what it is waiting for."""
    rows = Turn.objects.active().order_by("created_at")
    lines = [f"stuck: {t.pk} {t.agent_name} {t.status} phase={(t.state or {}).get('phase')!r} "
             f"claimed_by={t.claimed_by!r} recovery_attempts={t.recovery_attempts} "
             f"submitted={t.submitted_at is not None} waits_for="
             f"{list(t.waits.values_list('target_id', 'target__status'))} "
             f"updated_at={t.updated_at:%H:%M:%S.%f}" for t in rows[:limit]]
    total = rows.count()
    if total > limit:
        lines.append(f"stuck: ... and {total - limit} more")
    lines += [f"stuck: delivery {d.pk} key={d.key!r} to {d.destination_conversation_id}"
              for d in Delivery.objects.pending()[:limit]]
    if lines:
        lines.append(f"stuck: the broker holds {queued()} message(s); {listening()} worker(s) "
                     "listening")
    return lines


def violations(cluster: Cluster) -> list[str]:
    """Every problem found in the stored data and the ledger: none may be left."""
    entries = cluster.ledger()
    return [*stuck_turns(), *(str(v) for v in check_invariants()),
            *terminal_event_problems(entries), *input_problems(), *side_effect_problems(entries),
            *(f"I10 {problem}" for problem in hygiene_after(timeout=15))]


def effect_figures(entries: list[dict[str, Any]]) -> dict[str, int]:
    effects = [e for e in entries if e["ev"] == "effect"]
    unsafe = Counter(e["key"] for e in effects if e["tool"] == "unsafe_effect")
    safe = Counter(e["key"] for e in effects if e["tool"] == "safe_effect")
    return {
        "unsafe": sum(unsafe.values()),
        "unsafe_duplicated": sum(1 for n in unsafe.values() if n > 1),
        "safe_attempts": sum(safe.values()),
        "safe_keys": len(safe),
    }


def recovery_latencies(entries: list[dict[str, Any]]) -> tuple[list[float], int]:
    """Seconds from each worker fault to the next sign of life of each turn its worker held (a
    model call, an effect or an event from a process the fault did not halt; from the test
    process only a terminal event), and how many such turns showed none. A turn that ended
    between the nemesis's look at the claims and the fault is left out."""
    progress: dict[str, list[dict[str, Any]]] = {}
    for e in entries:
        if e["ev"] in ("model", "effect", "event") and e.get("turn") and (
                e["worker"] != "test" or e.get("type") in TERMINAL_EVENTS):
            progress.setdefault(e["turn"], []).append(e)
    latencies, silent = [], 0
    for fault in (e for e in entries if e["ev"] == "fault"):
        for turn in fault["turns"]:
            seen = progress.get(turn, [])
            if any(e["t"] <= fault["t"] and e.get("type") in TERMINAL_EVENTS for e in seen):
                continue
            latency = next((e["t"] - fault["t"] for e in seen
                            if e["t"] > fault["t"] and e["pid"] not in fault["halted"]), None)
            if latency is None:
                silent += 1
            else:
                latencies.append(latency)
    return sorted(latencies), silent


def latency_figures(entries: list[dict[str, Any]]) -> str:
    latencies, silent = recovery_latencies(entries)
    if not latencies:
        return f"recovery_latency=(n=0,silent={silent})"

    def at(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))]

    return (f"recovery_latency=(n={len(latencies)},p50={at(0.5):.1f}s,p95={at(0.95):.1f}s,"
            f"max={latencies[-1]:.1f}s,silent={silent})")


def figures(*, seed: int, seconds: float, workers: int, roots: int, actions: Counter[str],
            faults: Counter[str], sessions: int, entries: list[dict[str, Any]], problems: int,
            drained: float, elapsed: float) -> str:
    """The soak's one line of figures."""
    statuses = Counter(Turn.objects.values_list("status", flat=True))
    effects = effect_figures(entries)
    events = Counter(e["type"] for e in entries if e["ev"] == "event")
    unknown = ToolExecution.objects.filter(status=ToolStatus.INTERRUPTED).count()
    dead = Turn.objects.filter(status="failed", error__type="DeadLetter").count()

    def counts(counter: Counter[str]) -> str:
        return ",".join(f"{k}={v}" for k, v in sorted(counter.items()))

    return (
        f"soak: seed={seed} seconds={seconds:.0f} workers={workers} "
        f"submitted={roots} actions=({counts(actions)}) "
        f"turns={sum(statuses.values())} ({counts(statuses)}) "
        f"faults={sum(faults.values())} ({counts(faults)}) sessions_terminated={sessions} "
        f"recovered={events['turn.recovered']} {latency_figures(entries)} dead_lettered={dead} "
        f"model_calls={sum(1 for e in entries if e['ev'] == 'model')} "
        f"effects: unsafe={effects['unsafe']} unsafe_duplicated={effects['unsafe_duplicated']} "
        f"outcome_unknown={unknown} safe_keys={effects['safe_keys']} "
        f"safe_attempts={effects['safe_attempts']} "
        f"violations={problems} drain={drained:.0f}s elapsed={elapsed:.0f}s"
    )


def diagnose(cluster: Cluster, workers: list[Worker]) -> Path:
    """After a failed run: every database session, every worker thread's stack (SIGUSR2, into
    the worker logs) and a JSON dump of turnkit's rows, in the cluster's directory."""
    lines = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid, application_name, state, wait_event_type, wait_event, xact_start, "
            "left(query, 200) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid <> pg_backend_pid() ORDER BY pid")
        lines += [" | ".join(str(v) for v in row) for row in cursor.fetchall()]
        cursor.execute("SELECT locktype, relation::regclass, mode, granted, pid FROM pg_locks "
                       "WHERE pid <> pg_backend_pid() ORDER BY pid")
        lines += ["lock: " + " | ".join(str(v) for v in row) for row in cursor.fetchall()]
    for worker in workers:
        worker.signal(signal.SIGUSR2)  # tests/celery_app.py: faulthandler dumps every thread
    (cluster.root / "sessions.txt").write_text("\n".join(lines) + "\n")
    dump = {model.__name__: list(model.objects.values())
            for model in (Conversation, Turn, Message, ToolExecution, Delivery, Wait)}
    path = cluster.root / "dump.json"
    path.write_text(json.dumps(dump, default=str, indent=1))
    return cluster.root
