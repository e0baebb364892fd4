"""Shared by the benchmarks: interleaved timing, results files and markdown tables (no Django)."""

from __future__ import annotations

import json
import os
import platform
import statistics
import subprocess
import time
from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
X_FLOOR = "\N{MULTIPLICATION SIGN} floor"  # a column header
OUT = Path(os.environ.get("TURNKIT_BENCH_OUT", REPO / "build" / "bench"))


def interleave(systems: dict[str, Callable[[], None]], rounds: int, *,
               per: dict[str, int] | None = None,
               server_cpu: dict[str, Callable[[], float | None]] | None = None,
               ) -> dict[str, dict[str, Any]]:
    """Time one call of each system per round, alternating them (the order rotates every round,
    so drift on a loaded machine hits all alike).

    Returns, per system: ``wall`` (milliseconds per unit of each call, ``per[name]`` units a
    call: steps per turn), and the CPU per unit over all calls, less sensitive to a loaded
    machine than the wall clock: ``cpu_ms`` of this process (``time.process_time``) and
    ``server_cpu_ms`` of its database backends (``server_cpu[name]()``: their CPU seconds so
    far, or None when unknown).
    """
    names = list(systems)
    out: dict[str, dict[str, Any]] = {name: {"wall": [], "cpu": 0.0, "server": 0.0}
                                      for name in names}
    known = dict.fromkeys(names, True)
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            probe = (server_cpu or {}).get(name)
            server_before = probe() if probe else None
            cpu, start = time.process_time(), time.perf_counter()
            systems[name]()
            elapsed = (time.perf_counter() - start) * 1000
            out[name]["cpu"] += time.process_time() - cpu
            server_after = probe() if probe else None
            if server_before is None or server_after is None:
                known[name] = False
            else:
                out[name]["server"] += server_after - server_before
            out[name]["wall"].append(elapsed / (per or {}).get(name, 1))
    for name in names:
        units = rounds * (per or {}).get(name, 1)
        out[name]["cpu_ms"] = out[name].pop("cpu") * 1000 / units
        server = out[name].pop("server")
        out[name]["server_cpu_ms"] = server * 1000 / units if known[name] else None
    return out


def process_cpu(pids: Sequence[int]) -> float | None:
    """CPU seconds (user + system) the processes ``pids`` used so far, from /proc (the server
    must run on this machine; None when a process cannot be read)."""
    total = 0
    try:
        for pid in pids:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])  # utime, stime
    except (OSError, IndexError, ValueError):
        return None
    return total / os.sysconf("SC_CLK_TCK")


def summary(samples: Sequence[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {"median": statistics.median(ordered),
            "p95": ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))],
            "n": len(ordered)}


def _git(*args: str) -> str:
    out = subprocess.run(["git", "-C", str(REPO), *args], capture_output=True, text=True,
                         check=True, timeout=10)
    return out.stdout.strip()


def git_commit() -> str:
    """The package's code that was measured: the last commit touching turnkit_django/."""
    try:
        package = _git("log", "-1", "--format=%h %cs %s", "--", "turnkit_django")
        head = _git("rev-parse", "--short", "HEAD")
        dirty = _git("status", "--porcelain", "--", "turnkit_django")
    except (OSError, subprocess.SubprocessError):
        return "unknown"
    return (f"{package} (checkout {head}"
            + (", with uncommitted changes in turnkit_django/)" if dirty else ")"))


def machine() -> dict[str, Any]:
    cpu = "unknown"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {"date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "cpu": cpu,
            "cores": os.cpu_count(), "load": " ".join(f"{x:.1f}" for x in os.getloadavg()),
            "python": platform.python_version(), "commit": git_commit()}


def save(part: str, data: dict[str, Any]) -> Path:
    """Write one benchmark's results (``build/bench/<part>.json``) for bench/report.py."""
    OUT.mkdir(parents=True, exist_ok=True)
    path = OUT / f"{part}.json"
    path.write_text(json.dumps({"machine": machine(), **data}, indent=2, default=str))
    return path


def load(part: str) -> dict[str, Any] | None:
    path = OUT / f"{part}.json"
    return json.loads(path.read_text()) if path.exists() else None


def table(header: Sequence[str], rows: Sequence[Sequence[Any]], *,
          right: Sequence[int] = ()) -> str:
    """A markdown table; columns in ``right`` (by index) are right-aligned."""
    cells = [[str(c) for c in row] for row in rows]
    align = ["---:" if i in right else "---" for i in range(len(header))]
    lines = ["| " + " | ".join(header) + " |", "|" + "|".join(align) + "|"]
    lines += ["| " + " | ".join(row) + " |" for row in cells]
    return "\n".join(lines)


def num(value: float | None, digits: int = 0) -> str:
    """``value`` with thousands separators, or a dash."""
    if value is None:
        return "-"
    return f"{value:,.{digits}f}"


CPU_HEADER = "CPU ms/step client / server"


def cpu(system: dict[str, Any]) -> str:
    """A system's CPU per step: this process's (its client), and its database backends'."""
    client, server = system.get("cpu_ms"), system.get("server_cpu_ms")
    return f"{num(client, 2)} / {num(server, 2)}"


def server_tables(systems: Sequence[dict[str, Any]]) -> str:
    """The two tables of systems measured on PostgreSQL: each a dict with ``label``,
    ``median`` (ms/step), ``ratio`` (to the floor) and ``server`` (bench.pgstats.per_turn)."""
    rows = [[s["label"], num(s["median"], 3), f"{s['ratio']:.1f}",
             f"{num(s['server']['statements'], 1)} (+{num(s['server']['fk'], 1)})",
             num(s["server"]["round_trips_step"], 1), num(s["server"]["xacts"], 1),
             num(s["server"]["wal"]), cpu(s)] for s in systems]
    main = table(["system", "ms/step", X_FLOOR, "statements/turn sent (+FK checks)",
                  "round trips/step", "commits/turn", "WAL B/turn", CPU_HEADER], rows,
                 right=range(1, 8))
    rows = []
    for s in systems:
        sv = s["server"]
        hot = "; ".join(f"{name.removeprefix('turnkit_')} {h}/{u}"
                        for name, (h, u) in sorted(sv["hot"].items())) or "-"
        rows.append([s["label"], num(sv["begin"], 1), num(sv["commit"], 1),
                     num(sv["wal_cold"]), f"{num(sv['fpi'], 1)} / {num(sv['fpi_cold'], 1)}",
                     f"{num(sv['index_entries'])} ({num(sv['partial_index_entries'])})",
                     num(sv["index_bytes"]), hot])
    detail = table(["system", "BEGIN/turn", "COMMIT/turn", "WAL B/turn after CHECKPOINT",
                    "FPI/turn steady / after CHECKPOINT", "index entries/turn ≤ (partial)",
                    "index B/turn", "HOT/updates per block"], rows, right=range(1, 7))
    return "\n".join([main, "", detail])


__all__ = [
    "CPU_HEADER",
    "OUT",
    "REPO",
    "X_FLOOR",
    "cpu",
    "git_commit",
    "interleave",
    "load",
    "machine",
    "num",
    "process_cpu",
    "save",
    "server_tables",
    "summary",
    "table",
]
