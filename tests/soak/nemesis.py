"""The soak's nemesis: random process, broker and database faults, and a fleet kept at size N.

It injects one fault at a time, every ``interval`` seconds (drawn from the seeded generator),
heals it (SIGCONT, a replacement worker), and brings the fleet back to its size before the next
one. Victims are chosen among the workers running a turn when there are any (their pool child's
pid is in ``Turn.claimed_by``), so faults land mid-turn.

It runs in the test's main thread: the harness starts workers with ``setpriv --pdeathsig KILL``,
and the kernel sends that signal when the *thread* that started a worker ends, so a worker
started from a helper thread would die with the thread.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path

from django.db import connection

from tests.e2e.harness import Cluster, Worker, restart_redis_empty, ring
from tests.testapp.ledger import record
from turnkit_django.models import Turn

# Fault kinds and their weights.
FAULTS: dict[str, int] = {
    "sigkill": 3,           # SIGKILL to the worker's process group (main and pool child)
    "sigkill_child": 2,     # SIGKILL to the pool child only; Celery forks a new one
    "sigkill_main": 1,      # SIGKILL to the main process only; the orphan is killed a lease later
    "sigstop": 3,           # SIGSTOP to the group past the lease, then SIGCONT
    "sigterm": 2,           # SIGTERM to the group (warm shutdown), then a replacement
    "redis_restart": 1,     # Redis SIGKILLed and restarted empty
    "pg_terminate": 3,      # pg_terminate_backend of every session of one worker
    "duplicate": 3,         # the same run_turn published twice for an active turn
}
# Faults after which the victim's processes do no more work (an orphaned pool child is killed a
# lease later): for the recovery latency, its turns must move on elsewhere. After SIGSTOP (and
# SIGCONT), SIGTERM or pg_terminate_backend, the victim's own next step counts.
HALTING = frozenset({"sigkill", "sigkill_child", "sigkill_main"})
START_TIMEOUT = 120.0  # a worker starting on a loaded 2-core machine
SHUTDOWN_TIMEOUT = 60.0  # a warm shutdown finishes the step in progress first


def children(pid: int) -> list[int]:
    """The pids of ``pid``'s child processes (Celery's pool children), from /proc."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # pid (comm) state ppid ...: comm may contain spaces, so split after the last ')'.
        fields = stat.rsplit(")", 1)[-1].split()
        if len(fields) > 1 and int(fields[1]) == pid:
            found.append(int(entry.name))
    return found


def claimant_pid(claimed_by: str) -> int | None:
    """The process id in a claim identity (``kind@host:pid:random:thread``)."""
    try:
        return int(claimed_by.split("@", 1)[1].split(":")[1])
    except (IndexError, ValueError):
        return None


class Nemesis:
    """Inject faults into ``cluster``'s fleet until stopped; keep ``size`` workers running."""

    def __init__(self, cluster: Cluster, rng: random.Random, *, size: int, lease: float,
                 interval: tuple[float, float] = (1.0, 3.0)) -> None:
        self.cluster = cluster
        self.rng = rng
        self.size = size
        self.lease = lease
        self.interval = interval
        self.fleet: list[Worker] = []
        self.injected: Counter[str] = Counter()
        self.terminated_sessions = 0
        self.errors: list[str] = []
        self._orphans: list[tuple[float, Worker]] = []  # (kill at, worker) after sigkill_main

    # -- the fleet ---------------------------------------------------------------

    def replenish(self) -> None:
        """Start workers until ``size`` of them are alive (and not being shut down)."""
        self.fleet = [w for w in self.fleet if w.alive()]
        missing = self.size - len(self.fleet)
        if missing > 0:
            self.fleet += self.cluster.start(missing, timeout=START_TIMEOUT)

    def _victim(self) -> tuple[Worker, set[int], list[str]]:
        """A worker (running a turn when one does), its pids, and the turns it holds."""
        claims = {turn_id: claimant_pid(claimed_by) for turn_id, claimed_by in
                  Turn.objects.running().exclude(claimed_by="").values_list("pk", "claimed_by")}
        held: dict[str, tuple[set[int], list[str]]] = {}
        for worker in self.fleet:
            pids = {worker.pid, *children(worker.pid)}
            held[worker.name] = (pids, sorted(t for t, pid in claims.items() if pid in pids))
        candidates = [w for w in self.fleet if held[w.name][1]] or self.fleet
        victim = self.rng.choice(sorted(candidates, key=lambda w: w.name))
        return (victim, *held[victim.name])

    def _retire(self, worker: Worker) -> None:
        if worker in self.fleet:
            self.fleet.remove(worker)

    # -- faults ------------------------------------------------------------------

    def inject(self, kind: str) -> None:
        victim, pids, turns = self._victim()
        pool = sorted(children(victim.pid))
        if kind == "sigkill_child" and not pool:
            return self.inject("sigkill")
        if kind not in ("redis_restart", "duplicate"):  # the ledger's fault, for the latency
            record("fault", kind=kind, victim=victim.name, turns=turns,
                   halted=sorted(pids) if kind in HALTING else [])
        if kind == "sigkill":
            self._retire(victim)
            victim.kill()
        elif kind == "sigkill_child":
            os.kill(self.rng.choice(pool), signal.SIGKILL)
        elif kind == "sigkill_main":
            self._retire(victim)
            os.kill(victim.pid, signal.SIGKILL)
            victim.proc.wait(timeout=10)
            self._orphans.append((time.monotonic() + self.lease + 1.0, victim))
        elif kind == "sigstop":
            victim.pause()
            time.sleep(self.lease + self.rng.uniform(0.5, 2.5))  # the fault's duration
            victim.resume()
        elif kind == "sigterm":
            self._retire(victim)
            victim.signal(signal.SIGTERM)
            try:
                victim.proc.wait(timeout=SHUTDOWN_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.errors.append(f"worker {victim.name} did not stop within "
                                   f"{SHUTDOWN_TIMEOUT:.0f} s of SIGTERM")
            victim.stop(timeout=0)  # SIGKILL pool children outliving their main process
        elif kind == "redis_restart":
            restart_redis_empty()
        elif kind == "pg_terminate":
            with connection.cursor() as cursor:
                cursor.execute(
                    "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
                    "WHERE datname = current_database() AND application_name = %s",
                    [f"turnkit-e2e-{victim.name}"])
                self.terminated_sessions += int(cursor.fetchone()[0])
        elif kind == "duplicate":
            active = list(Turn.objects.filter(submitted_at__isnull=False).active()
                          .order_by("pk").values_list("pk", flat=True)[:50])
            if not active:
                return None
            turn_id = self.rng.choice(active)
            task_id = f"soak-duplicate-{self.rng.getrandbits(64):016x}"
            ring(turn_id, task_id=task_id)
            ring(turn_id, task_id=task_id)
        else:
            raise ValueError(f"unknown fault {kind!r}; choose one of {sorted(FAULTS)}")
        self.injected[kind] += 1
        return None

    def _reap_orphans(self, *, all_of_them: bool = False) -> None:
        now = time.monotonic()
        for due, worker in list(self._orphans):
            if all_of_them or due <= now:
                worker.signal(signal.SIGKILL)
                self._orphans.remove((due, worker))

    # -- the run -----------------------------------------------------------------

    def run(self, seconds: float, tick: Callable[[], None]) -> None:
        """Inject faults for ``seconds``, calling ``tick()`` about once a second meanwhile."""
        kinds, weights = list(FAULTS), list(FAULTS.values())
        self.replenish()
        deadline = time.monotonic() + seconds
        while True:
            due = min(time.monotonic() + self.rng.uniform(*self.interval), deadline)
            while (now := time.monotonic()) < due:
                tick()
                time.sleep(min(1.0, due - now))  # the time between faults
            if now >= deadline:
                return
            kind = self.rng.choices(kinds, weights)[0]
            try:
                self.inject(kind)
                self._reap_orphans()
                self.replenish()
            except Exception as exc:
                self.errors.append(f"{kind}: {type(exc).__name__}: {exc}")

    def heal(self) -> None:
        """Resume every worker, kill the orphans, and bring the fleet to size."""
        for worker in self.fleet:
            worker.resume()
        self._reap_orphans(all_of_them=True)
        self.replenish()
        connection.close()
