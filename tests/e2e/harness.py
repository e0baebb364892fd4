"""The e2e harness: real ``celery worker`` processes, a reconcile loop, Redis restarts, checks.

Nothing here fakes turnkit: workers run ``turnkit.run_turn`` from ``turnkit_django.celery`` against
the session's PostgreSQL test database and the throwaway Redis; the test process submits through
the public API and recovers through ``turnkit_django.reconcile()``. Every wait is a poll with a
deadline (:func:`wait_for`), never a sleep used as synchronization.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import urlparse
from uuid import uuid4

from django.db import connection

from tests.celery_app import PRERUN_HOLD, app  # also makes it the process's default app
from tests.testapp import ledger
from tests.testapp.agents import SCRIPTED_AGENT
from turnkit_django.base.states import TERMINAL_TURN_STATUSES
from turnkit_django.models import Turn

REPO = Path(__file__).resolve().parents[2]
QUEUE = "turnkit"
TERMINAL = [str(s) for s in TERMINAL_TURN_STATUSES]
T = TypeVar("T")


def wait_for(predicate: Callable[[], T], *, timeout: float, what: str,
             interval: float = 0.05) -> T:
    """Poll ``predicate`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = predicate()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout:.0f} s waiting for {what}")
        time.sleep(interval)


def script(*steps: dict[str, Any]) -> str:
    """The input of an ``e2e_scripted`` turn: its model answers (see tests/testapp/agents.py)."""
    return json.dumps({"nonce": uuid4().hex, "steps": list(steps)})


def submit(*steps: dict[str, Any], principal: Any = None) -> str:
    """Submit a background run of the scripted agent (as ``principal``); return its turn id."""
    from turnkit_django.agents.registry import get_agent

    options = {} if principal is None else {"principal": principal}
    return get_agent(SCRIPTED_AGENT).submit(script(*steps), **options).id


def wait_terminal(turn_ids: Iterable[str], *, timeout: float) -> dict[str, Turn]:
    """Wait until every turn is terminal; return the rows by id."""
    ids = list(turn_ids)
    wait_for(lambda: Turn.objects.filter(pk__in=ids, status__in=TERMINAL).count() == len(ids),
             timeout=timeout, what=f"{len(ids)} turn(s) to finish")
    return Turn.objects.in_bulk(ids)


# --------------------------------------------------------------------------- workers


class Worker:
    """One ``celery worker`` process (main + pool children) in its own process group."""

    def __init__(self, name: str, proc: subprocess.Popen[bytes], log: Path) -> None:
        self.name = name
        self.proc = proc
        self.log = log

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.poll() is None

    def ready(self) -> bool:
        text = self.log.read_text(errors="replace") if self.log.exists() else ""
        if not self.alive():
            raise AssertionError(f"worker {self.name} exited with {self.proc.returncode}:\n"
                                 f"{tail(self.log)}")
        return f"{self.name}@" in text and " ready." in text

    def signal(self, sig: int) -> None:
        """Send ``sig`` to the whole worker: main process and pool children."""
        try:
            os.killpg(self.proc.pid, sig)
        except ProcessLookupError:
            pass

    def kill(self) -> None:
        """SIGKILL the main process and its pool children at once, and reap it."""
        self.signal(signal.SIGKILL)
        self.proc.wait(timeout=10)

    def pause(self) -> None:
        self.signal(signal.SIGSTOP)

    def resume(self) -> None:
        self.signal(signal.SIGCONT)

    def stop(self, timeout: float = 5.0) -> None:
        """SIGTERM (warm shutdown), then SIGKILL the group after ``timeout``."""
        if self.alive():
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                pass
        self.signal(signal.SIGKILL)  # pool children outliving their main process, if any
        self.proc.wait(timeout=10)


def tail(path: Path, lines: int = 40) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


FAKETIME_LIBRARY = Path("/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1")


def skewed_clock(offset: str) -> dict[str, str]:
    """Environment that runs a process with its wall clock off by ``offset`` (``"+400s"``):
    libfaketime, installed by the test command; the monotonic clock stays real."""
    if not FAKETIME_LIBRARY.exists():
        raise AssertionError(f"{FAKETIME_LIBRARY} is missing: the test command installs "
                             "libfaketime (scripts/services.sh)")
    return {"LD_PRELOAD": str(FAKETIME_LIBRARY), "FAKETIME": offset,
            "FAKETIME_DONT_FAKE_MONOTONIC": "1", "FAKETIME_NO_CACHE": "1"}


# A worker gets SIGKILL if the test process dies without its teardown (killed by CI, say).
# The kernel sends it when the *thread* that started the worker ends: start workers from the
# test's main thread (or from a thread that outlives them).
_DIE_WITH_PARENT = ["setpriv", "--pdeathsig", "KILL"] if shutil.which("setpriv") else []


class Cluster:
    """Workers, ledger and gates of one test, and a reconcile loop in the test process."""

    def __init__(self, root: Path, database_name: str) -> None:
        self.root = root
        self.database_name = database_name
        self.ledger_path = root / "ledger.jsonl"
        self.media_root = root / "media"
        self.gates = root / "gates"
        self.gates.mkdir(parents=True, exist_ok=True)
        self.workers: dict[str, Worker] = {}
        self.reconciler: Reconciler | None = None
        self._count = 0

    # -- processes ---------------------------------------------------------------

    def env(self, name: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update({
            "DJANGO_SETTINGS_MODULE": "tests.e2e.worker_settings",
            "TURNKIT_E2E_DATABASE_NAME": self.database_name,
            ledger.LEDGER_ENV: str(self.ledger_path),
            ledger.GATES_ENV: str(self.gates),
            ledger.WORKER_ENV: name,
            "TURNKIT_E2E_MEDIA_ROOT": str(self.media_root),
            "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), env.get("PYTHONPATH")])),
        })
        return env

    def start(self, count: int = 2, *, pool: str = "prefork", timeout: float = 120,
              env: dict[str, str] | None = None,
              app: str = "tests.celery_app", concurrency: int = 1) -> list[Worker]:
        """Start ``count`` workers of the Celery module ``app``; wait until each is consuming
        (``env``: extra variables, such as :func:`skewed_clock`)."""
        started = []
        for _ in range(count):
            self._count += 1
            name = f"w{self._count}"
            log = self.root / f"{name}.log"
            command = [
                *_DIE_WITH_PARENT,
                sys.executable, "-m", "celery", "-A", app, "worker",
                "-Q", QUEUE, f"--pool={pool}", f"--concurrency={concurrency}", "-n", f"{name}@%h",
                "--without-gossip", "--without-mingle", "--without-heartbeat", "-l", "INFO",
            ]
            with log.open("ab") as out:
                proc = subprocess.Popen(command, cwd=REPO, env={**self.env(name), **(env or {})},
                                        stdout=out,
                                        stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                        start_new_session=True)
            worker = Worker(name, proc, log)
            self.workers[name] = worker
            started.append(worker)
        for worker in started:
            wait_for(worker.ready, timeout=timeout, what=f"worker {worker.name} to be ready")
        return started

    def worker(self, name: str) -> Worker:
        return self.workers[name]

    def start_reconciler(self, *, sweep: bool = False) -> Reconciler:
        self.reconciler = Reconciler(sweep=sweep)
        self.reconciler.start()
        return self.reconciler

    def shutdown(self) -> None:
        """Stop the reconcile loop and every worker (always called at teardown).

        Workers are stopped even when the reconcile loop reports an error, which is raised last.
        """
        try:
            if self.reconciler is not None:
                self.reconciler.stop()
        finally:
            for worker in self.workers.values():  # SIGTERM all first: they stop in parallel
                worker.signal(signal.SIGCONT)
                if worker.alive():
                    worker.signal(signal.SIGTERM)
            for worker in self.workers.values():
                worker.stop()

    def logs(self) -> str:
        return "\n".join(f"----- {w.name} (pid {w.pid}) -----\n{tail(w.log)}"
                         for w in self.workers.values())

    # -- ledger and gates --------------------------------------------------------

    def ledger(self, ev: str | None = None, **match: Any) -> list[dict[str, Any]]:
        """Ledger entries, optionally only those of kind ``ev`` whose fields equal ``match``."""
        return [e for e in ledger.read(self.ledger_path)
                if (ev is None or e["ev"] == ev) and all(e.get(k) == v for k, v in match.items())]

    def wait_ledger(self, ev: str, *, count: int = 1, timeout: float = 30,
                    **match: Any) -> list[dict[str, Any]]:
        return wait_for(lambda: (found := self.ledger(ev, **match)) and len(found) >= count
                        and found, timeout=timeout, what=f"{count} ledger {ev!r} {match}")

    def open_gate(self, name: str) -> None:
        ledger.open_gate(self.gates, name)

    @contextmanager
    def hold_tasks(self) -> Iterator[Callable[[], None]]:
        """Hold every task right before its body; yields ``release()`` to let them all go."""
        held = self.gates / f"{PRERUN_HOLD}.hold"
        held.touch()
        try:
            yield lambda: held.unlink(missing_ok=True)
        finally:
            held.unlink(missing_ok=True)

    def run_turn_deliveries(self, turn_id: str, ev: str = "task.prerun") -> list[dict[str, Any]]:
        return [e for e in self.ledger(ev, task="turnkit.run_turn") if e["args"] == [turn_id]]


class Reconciler:
    """``turnkit_django.reconcile()`` every RECONCILE_INTERVAL in a thread of the test process
    (with ``sweep``, also ``cancel_sweep()``, as the beat entries do)."""

    def __init__(self, *, sweep: bool = False) -> None:
        from turnkit_django.conf import turnkit_settings

        self.interval = float(turnkit_settings.RECONCILE_INTERVAL)
        self.sweep = sweep
        self.passes = 0
        self.errors: list[BaseException] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="e2e-reconcile", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def _run(self) -> None:
        from turnkit_django import reconcile
        from turnkit_django.services import cancel_sweep

        try:
            while not self._stop.is_set():
                try:
                    reconcile()
                    if self.sweep:
                        cancel_sweep()
                except Exception as exc:  # reported by stop()
                    self.errors.append(exc)
                self.passes += 1
                self._stop.wait(self.interval)
        finally:
            connection.close()

    def halt(self) -> None:
        """Stop the loop and wait for it; what ``reconcile()`` raised stays in ``errors``."""
        self._stop.set()
        self._thread.join(timeout=30)
        assert not self._thread.is_alive(), "the reconcile loop did not stop"

    def stop(self) -> None:
        self.halt()
        assert not self.errors, f"reconcile() raised: {self.errors!r}"


# --------------------------------------------------------------------------- Redis

_restarted: list[subprocess.Popen[bytes]] = []  # outlive the session; services.sh stops them


def redis_url() -> str:
    return os.environ["TURNKIT_TEST_REDIS_URL"]


def redis_client() -> Any:
    import redis

    return redis.Redis.from_url(redis_url(), socket_timeout=5)


def ring(turn_id: str, *, task_id: str | None = None) -> None:
    """Send one more ``turnkit.run_turn`` message for ``turn_id`` (a duplicate doorbell)."""
    app.send_task("turnkit.run_turn", args=[turn_id], queue=QUEUE, task_id=task_id)


def queued() -> int:
    """Messages waiting in the turnkit queue (not yet fetched by a worker)."""
    return int(redis_client().llen(QUEUE))


def listening() -> int:
    """Connections blocked fetching from Redis (BRPOP): one per idle, consuming worker."""
    return int(redis_client().info("clients")["blocked_clients"])


def flush_redis() -> None:
    redis_client().flushall()


def _port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=0.5):
            return True
    except OSError:
        return False


def restart_redis_empty() -> None:
    """SIGKILL the broker's redis-server and start an empty one on the same port.

    The new server uses the data directory of the one ``scripts/services.sh`` started (and its
    pid file), so ``services.sh stop`` shuts it down like the original.
    """
    parsed = urlparse(redis_url())
    host, port = parsed.hostname or "127.0.0.1", int(parsed.port or 6379)
    binary = os.environ.get("TURNKIT_REDIS_SERVER") or shutil.which("redis-server")
    assert binary, "no redis-server binary (TURNKIT_REDIS_SERVER)"
    pid = int(redis_client().info("server")["process_id"])
    os.kill(pid, signal.SIGKILL)
    wait_for(lambda: not _port_open(host, port), timeout=10, what="Redis to die")
    state = Path(os.environ.get("TURNKIT_REDIS_STATE_DIR") or REPO / "build" / "e2e-redis")
    state.mkdir(parents=True, exist_ok=True)
    with (state / "redis.log").open("ab") as out:
        proc = subprocess.Popen(
            [binary, "--port", str(port), "--bind", host, "--save", "", "--appendonly", "no",
             "--daemonize", "no", "--dir", str(state), "--pidfile", str(state / "redis.pid")],
            stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, cwd="/",
            start_new_session=True)
    _restarted.append(proc)

    def answers() -> bool:
        try:
            return bool(redis_client().ping())
        except Exception:
            assert proc.poll() is None, f"the new redis-server exited with {proc.returncode}"
            return False

    wait_for(answers, timeout=10, what="the new Redis to answer")


# --------------------------------------------------------------------------- hygiene


def hygiene_problems() -> list[str]:
    """I10: advisory locks held, and sessions idle in a transaction, on the test database."""
    problems = []
    with connection.cursor() as cursor:
        cursor.execute("SELECT pid, granted FROM pg_locks WHERE locktype = 'advisory'")
        problems += [f"advisory lock held by backend {pid} (granted={granted})"
                     for pid, granted in cursor.fetchall()]
        cursor.execute(
            "SELECT pid, application_name, state, left(query, 120) FROM pg_stat_activity "
            "WHERE datname = current_database() AND pid <> pg_backend_pid() "
            "AND state LIKE 'idle in transaction%%'")
        problems += [f"backend {pid} ({app}) is {state}: {query}"
                     for pid, app, state, query in cursor.fetchall()]
    return problems


def hygiene_after(timeout: float = 10) -> list[str]:
    """I10 once quiescent: poll (bounded) until clean; return the problems left (none: [])."""
    last: list[str] = []

    def clean() -> bool:
        last[:] = hygiene_problems()
        return not last

    try:
        wait_for(clean, timeout=timeout, what="database hygiene (I10)", interval=0.1)
    except AssertionError:
        return last
    return []


def assert_hygiene(timeout: float = 10) -> None:
    """Wait (bounded) for quiescence: no advisory locks, nobody idle in a transaction."""
    problems = hygiene_after(timeout)
    if problems:
        raise AssertionError("I10 violated:\n  " + "\n  ".join(problems))
