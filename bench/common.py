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
               per: dict[str, int] | None = None) -> dict[str, list[float]]:
    """Time one call of each system per round, alternating them (the order rotates every round,
    so drift on a loaded machine hits all alike); return milliseconds per unit for each.

    ``per[name]``: what one call is worth (steps per turn), dividing its time.
    """
    names = list(systems)
    samples: dict[str, list[float]] = {name: [] for name in names}
    for index in range(rounds):
        shift = index % len(names)
        for name in names[shift:] + names[:shift]:
            start = time.perf_counter()
            systems[name]()
            elapsed = (time.perf_counter() - start) * 1000
            samples[name].append(elapsed / (per or {}).get(name, 1))
    return samples


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


def server_tables(systems: Sequence[dict[str, Any]]) -> str:
    """The two tables of systems measured on PostgreSQL: each a dict with ``label``,
    ``median`` (ms/step), ``ratio`` (to the floor) and ``server`` (bench.pgstats.per_turn)."""
    rows = [[s["label"], num(s["median"], 3), f"{s['ratio']:.1f}",
             f"{num(s['server']['statements'], 1)} (+{num(s['server']['fk'], 1)})",
             num(s["server"]["round_trips_step"], 1), num(s["server"]["xacts"], 1),
             num(s["server"]["wal"])] for s in systems]
    main = table(["system", "ms/step", X_FLOOR, "statements/turn sent (+FK checks)",
                  "round trips/step", "commits/turn", "WAL B/turn"], rows, right=range(1, 7))
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


__all__ = ["OUT", "REPO", "X_FLOOR", "git_commit", "interleave", "load", "machine", "num", "save",
           "server_tables", "summary", "table"]
