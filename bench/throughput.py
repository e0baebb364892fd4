"""Background throughput on real Celery workers against a bare task doing one transaction.

Run with ``make bench`` (throwaway PostgreSQL and Redis). In one run, for one worker process
with one and then with two prefork children, blocks alternate:

* bare: N ``bench.bare_step`` tasks (``bench/tasks.py``: one INSERT + UPDATE transaction each,
  on a row of its own) queued at once; and N tasks of three such transactions each, as many
  commits as a turn makes;
* turns: N background turns of model, tool, model (``bench.workload.T3``: ``agent.submit()``,
  then the ``turnkit.run_turn`` task: the turn, the lane hand-off, the wake and a maintenance
  pass) submitted at once.

Everything is queued before the worker starts, so the submission and the worker's start-up are
not timed: the rate is (N - 1) over the time between the first and the last completion, by the
database clock (the bare rows' ``clock_timestamp()``, the turns' ``completed_at``). The workers
connect as a role of their own, so ``pg_stat_statements`` tells what they sent per task or turn
apart from what ``submit()`` sent in this process.

Writes ``build/bench/throughput.json`` and prints a markdown table. Nothing is asserted.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

os.environ["DJANGO_SETTINGS_MODULE"] = "bench.worker_settings"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import django

django.setup()

import redis  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench import pgstats, render  # noqa: E402
from bench.celery_app import QUEUE  # noqa: E402  (the default Celery app from here on)
from bench.common import OUT, REPO, save  # noqa: E402
from bench.tasks import bare_step, create_tables  # noqa: E402
from bench.workload import T3  # noqa: E402
from turnkit_django.base.states import TERMINAL_TURN_STATUSES  # noqa: E402
from turnkit_django.models import Turn  # noqa: E402

WORKER_ROLE = "bench_worker"
TERMINAL = [str(s) for s in TERMINAL_TURN_STATUSES]
# A worker gets SIGKILL if this process dies without stopping it.
_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []


def as_role(url: str, role: str) -> str:
    parts = urlsplit(url)
    host = parts.netloc.rsplit("@", 1)[-1]
    return urlunsplit((parts.scheme, f"{role}@{host}", parts.path, parts.query, parts.fragment))


class Worker:
    """One ``celery worker`` process with ``children`` prefork children (or threads, with
    ``pool="threads"``), in its own group."""

    def __init__(self, children: int, url: str, log: Path, *, pool: str = "prefork",
                 env: dict[str, str] | None = None) -> None:
        env = {**os.environ, **(env or {}), "DJANGO_SETTINGS_MODULE": "bench.worker_settings",
               "TURNKIT_BENCH_DATABASE_URL": as_role(url, WORKER_ROLE),
               "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO),
                                                           os.environ.get("PYTHONPATH")]))}
        command = [*_DIE_WITH_PARENT, sys.executable, "-m", "celery", "-A", "bench.celery_app",
                   "worker", "-Q", QUEUE, f"--pool={pool}", f"--concurrency={children}",
                   "-n", f"bench{children}@%h", "--without-gossip", "--without-mingle",
                   "--without-heartbeat", "-l", "WARNING"]
        self.log = log
        with log.open("ab") as out:
            self.proc = subprocess.Popen(command, cwd=REPO, env=env, stdout=out,
                                         stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                         start_new_session=True)

    def check(self) -> None:
        if self.proc.poll() is not None:
            tail = "\n".join(self.log.read_text(errors="replace").splitlines()[-30:])
            raise SystemExit(f"the worker exited with {self.proc.returncode}:\n{tail}")

    def stop(self) -> None:
        """Warm shutdown (SIGTERM to the group), then SIGKILL what is left."""
        try:
            os.killpg(self.proc.pid, signal.SIGTERM)
            self.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            pass
        except ProcessLookupError:
            pass
        try:
            os.killpg(self.proc.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        self.proc.wait(timeout=10)


def wait_for(done: Any, worker: Worker, *, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not done():
        worker.check()
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(0.2)


def scalar(sql: str, params: list[Any] | None = None) -> Any:
    with connection.cursor() as cursor:
        cursor.execute(sql, params or [])
        return cursor.fetchone()[0]


class Bench:
    def __init__(self, turns: int) -> None:
        self.n = turns
        self.url = os.environ["TURNKIT_BENCH_DATABASE_URL"]
        self.database = pgstats.database_of(self.url)
        self.observer = pgstats.Observer(self.url)
        self.broker = redis.Redis.from_url(os.environ["TURNKIT_BENCH_REDIS_URL"])
        if not self.observer.scalar("SELECT count(*) FROM pg_roles WHERE rolname = %s",
                                    [WORKER_ROLE]):
            self.observer.execute(f"CREATE ROLE {WORKER_ROLE} LOGIN SUPERUSER")
        self.role_oid = self.observer.scalar("SELECT oid FROM pg_roles WHERE rolname = %s",
                                             [WORKER_ROLE])

    def sent(self, worker: bool) -> int:
        """Statements sent since the reset, by the workers or by this process."""
        rows = self.observer.execute(
            "SELECT sum(s.calls) FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
            "WHERE d.datname = %s AND s.toplevel AND s.query NOT LIKE %s "
            "AND (s.userid = %s) = %s",
            [self.database, "%FOR KEY SHARE OF x%", self.role_oid, worker])
        return int(rows[0][0] or 0)

    def leftover(self) -> int:
        """Empty the queue after a block (the worker stopped); return how many messages were
        left: doorbells that found their turn finished, such as the ones a maintenance pass
        rings again for turns that waited long in the backlog."""
        left = int(self.broker.llen(QUEUE))
        self.broker.delete(QUEUE, "unacked", "unacked_index")
        return left

    def bare(self, children: int, steps: int = 1) -> dict[str, Any]:
        self.leftover()
        create_tables(self.n)
        for job in range(1, self.n + 1):
            bare_step.apply_async(args=(job, steps), queue=QUEUE)
        self.observer.reset_statements()
        worker = Worker(children, self.url, OUT / f"worker-{children}.log")
        try:
            wait_for(lambda: scalar("SELECT count(*) FROM bench_bare_log") >= self.n * steps,
                     worker, timeout=300, what=f"{self.n} bare tasks")
        finally:
            worker.stop()
        seconds = scalar("SELECT extract(epoch FROM max(created_at) - min(created_at)) "
                         "FROM bench_bare_log")
        return {"per_s": (self.n - 1) / float(seconds), "seconds": float(seconds),
                "statements": self.sent(worker=True) / self.n, "left": self.leftover()}

    def bare3(self, children: int) -> dict[str, Any]:
        """Bare tasks of three transactions: as many commits as a turn of model, tool, model."""
        return self.bare(children, steps=3)

    def turns(self, children: int) -> dict[str, Any]:
        self.leftover()
        self.observer.reset_statements()
        ids = [T3.submit("What does the probe say?").id for _ in range(self.n)]
        submit = self.sent(worker=False) / self.n
        self.observer.reset_statements()
        worker = Worker(children, self.url, OUT / f"worker-{children}.log")
        finished = Turn.objects.filter(pk__in=ids, status__in=TERMINAL)
        try:
            wait_for(lambda: finished.count() >= self.n, worker, timeout=600,
                     what=f"{self.n} turns")
        finally:
            worker.stop()
        run = self.sent(worker=True) / self.n
        completed = Turn.objects.filter(pk__in=ids, status="completed").count()
        seconds = scalar("SELECT extract(epoch FROM max(completed_at) - min(completed_at)) "
                         "FROM turnkit_turn WHERE id = ANY(%s)", [ids])
        return {"per_s": (self.n - 1) / float(seconds), "seconds": float(seconds),
                "completed": completed, "statements_submit": submit, "statements_run": run,
                "left": self.leftover()}


def main() -> None:
    n = int(os.environ.get("BENCH_THROUGHPUT_TURNS", "300"))
    rounds = int(os.environ.get("BENCH_THROUGHPUT_ROUNDS", "2"))
    call_command("migrate", verbosity=0)
    OUT.mkdir(parents=True, exist_ok=True)
    bench = Bench(n)
    results: dict[str, Any] = {}
    for children in (1, 2):
        blocks: dict[str, list[dict[str, Any]]] = {"bare": [], "bare3": [], "turns": []}
        for index in range(rounds):
            order = ["bare", "bare3", "turns"]
            order = order if index % 2 == 0 else order[::-1]
            for kind in order:
                blocks[kind].append(getattr(bench, kind)(children))
                last = blocks[kind][-1]
                print(f"  {children} child(ren), {kind}: {last['per_s']:.1f}/s, "
                      f"{last['left']} message(s) left in the queue", flush=True)
        results[str(children)] = blocks
    bench.observer.close()
    data = {"n": n, "rounds": rounds, "results": results}
    save("throughput", data)
    print(render.throughput(data))


if __name__ == "__main__":
    main()
