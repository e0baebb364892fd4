"""``make bench`` keeps running against the current code: its per-step part, on a SQLite file.

The benchmarks are not part of ``make test`` (they take minutes and assert nothing); this smoke
runs one round of ``bench/step_overhead.py`` (floor, inline, background; a few seconds) and its
report, so a change to the package that the bench no longer runs against fails here. The parts
needing PostgreSQL, Redis or .venv-peers run only in ``make bench`` / ``make bench-peers``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def run(args: list[str], out: Path, database: Path) -> subprocess.CompletedProcess[str]:
    env = {key: value for key, value in os.environ.items()
           if not key.startswith(("TURNKIT_", "DJANGO_SETTINGS_MODULE", "BENCH_"))}
    env.update({"TURNKIT_BENCH_OUT": str(out), "BENCH_ROUNDS": "1",
                "TURNKIT_BENCH_DATABASE_URL": f"sqlite:///{database}"})
    return subprocess.run([sys.executable, *args], cwd=REPO, env=env, capture_output=True,
                          text=True, timeout=120, check=False)


def test_the_per_step_bench_runs_a_round_on_sqlite_and_reports_it(tmp_path: Path) -> None:
    out = tmp_path / "bench"
    done = run(["bench/step_overhead.py"], out, tmp_path / "bench.sqlite3")
    assert done.returncode == 0, done.stderr[-3000:]

    data = json.loads((out / "sqlite.json").read_text())
    assert set(data["systems"]) == {"floor", "inline", "background"}
    inline = data["systems"]["inline"]
    assert inline["client"]["statements"] > 0 and inline["split"]["model"]
    report = run(["bench/report.py", "sqlite"], out, tmp_path / "bench.sqlite3")
    assert report.returncode == 0, report.stderr[-3000:]
    assert "turnkit-django inline" in report.stdout and "| floor: sqlite3" in report.stdout
