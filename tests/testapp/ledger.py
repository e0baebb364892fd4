"""An effect ledger and filesystem gates shared by the e2e test process and its Celery workers.

The ledger is a file opened with ``O_APPEND`` whose path comes from ``TURNKIT_E2E_LEDGER``: every
process (workers, their pool children, the test process) appends one JSON line per fact, so side
effects and model calls are counted outside turnkit's own tables. Without the variable (unit and
integration tiers) writing is a no-op.

A gate (``TURNKIT_E2E_GATES`` names the directory) lets a test hold one process at a precise
point: the *first* process to reach gate ``g`` creates ``g.entered`` and waits until the test
creates ``g.open``; any later process (the replacement worker after a crash) passes at once. A
hold (:func:`hold`) stops *every* process that reaches it, so the test can release them together.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

LEDGER_ENV = "TURNKIT_E2E_LEDGER"
GATES_ENV = "TURNKIT_E2E_GATES"
WORKER_ENV = "TURNKIT_E2E_WORKER"
GATE_TIMEOUT = 120.0


def worker_name() -> str:
    return os.environ.get(WORKER_ENV, "test")


def record(ev: str, **fields: Any) -> None:
    """Append one fact to the ledger (a single ``write`` on an ``O_APPEND`` descriptor)."""
    path = os.environ.get(LEDGER_ENV)
    if not path:
        return
    line = json.dumps({"ev": ev, "worker": worker_name(), "pid": os.getpid(), "t": time.time(),
                       **fields}, sort_keys=True, default=str) + "\n"
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read(path: str | os.PathLike[str]) -> list[dict[str, Any]]:
    """Every complete entry of the ledger at ``path``, in append order.

    A reader can see a line another process is still appending (an ``O_APPEND`` write is atomic
    against other writers, not against readers), so text after the last newline is left for the
    next read.
    """
    try:
        text = Path(path).read_text()
    except FileNotFoundError:
        return []
    complete, _, _partial = text.rpartition("\n")
    return [json.loads(line) for line in complete.splitlines() if line]


def count(ev: str, **match: Any) -> int:
    """How many entries of kind ``ev`` whose fields equal ``match`` the ledger holds (0 without
    one): a fake service's memory of its calls, shared by every worker."""
    path = os.environ.get(LEDGER_ENV)
    return sum(1 for e in read(path) if e["ev"] == ev and all(
        e.get(k) == v for k, v in match.items())) if path else 0


def gate(name: str, **fields: Any) -> None:
    """Block the first process that reaches gate ``name`` until the test opens it."""
    directory = os.environ.get(GATES_ENV)
    if not directory or not name:
        return
    base = Path(directory) / name
    try:
        os.close(os.open(f"{base}.entered", os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644))
    except FileExistsError:
        record("gate.passed", gate=name, **fields)
        return
    record("gate.blocked", gate=name, **fields)
    deadline = time.monotonic() + GATE_TIMEOUT
    opened = Path(f"{base}.open")
    while not opened.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"gate {name!r} was never opened")
        time.sleep(0.02)
    record("gate.released", gate=name, **fields)


def armed_gate(name: str, **fields: Any) -> None:
    """A :func:`gate` only once the test armed it (``<gates>/<name>.arm`` exists), for points
    every turn passes (a runtime event) where only one test wants to stop."""
    directory = os.environ.get(GATES_ENV)
    if directory and name and (Path(directory) / f"{name}.arm").exists():
        gate(name, **fields)


def hold(name: str, **fields: Any) -> None:
    """While ``<gates>/<name>.hold`` exists, stop every process that gets here.

    A barrier for the test: it creates the file, waits for the ``hold.waiting`` entries it
    expects, then removes the file, releasing them all at the same moment.
    """
    directory = os.environ.get(GATES_ENV)
    held = Path(directory or ".") / f"{name}.hold"
    if not directory or not held.exists():
        return
    record("hold.waiting", hold=name, **fields)
    deadline = time.monotonic() + GATE_TIMEOUT
    while held.exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"hold {name!r} was never released")
        time.sleep(0.002)
    record("hold.released", hold=name, **fields)


def open_gate(directory: str | os.PathLike[str], name: str) -> None:
    """Let the process blocked on gate ``name`` (and any later one) through."""
    (Path(directory) / f"{name}.open").touch()
