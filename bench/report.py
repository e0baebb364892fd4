"""Print the results of the last ``make bench`` / ``make bench-peers`` as one markdown report.

``python bench/report.py [PART...]`` reads ``build/bench/<part>.json`` (default: every part
found) and prints the machine, the versions and each part's tables (bench/render.py), ready to
paste into docs/performance.md.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import render
from bench.common import load

PARTS = {"steps": render.steps, "sqlite": render.steps, "growth": render.growth,
         "throughput": render.throughput, "inflight": render.inflight, "peers": render.peers,
         "tenants": render.tenants, "streaming": render.streaming, "kill": render.kill,
         "history": render.history, "wal": render.wal}


def header(results: dict[str, dict[str, Any]]) -> str:
    machine = next(iter(results.values()))["machine"]
    settings = next((r["settings"] for r in results.values() if "settings" in r), {})
    pg = (f"; PostgreSQL {settings['server_version'].split()[0]} (fsync={settings['fsync']}, "
          f"synchronous_commit={settings['synchronous_commit']}, "
          f"full_page_writes={settings['full_page_writes']}, "
          f"shared_buffers={int(settings['shared_buffers']) * 8 // 1024} MB)") if settings else ""
    loads = ", ".join(f"{part} {r['machine']['load']}" for part, r in results.items())
    return (f"Measured {machine['date']}, turnkit_django/ at `{machine['commit']}`: "
            f"{machine['cpu']}, "
            f"{machine['cores']} cores, Python {machine['python']}{pg}. Load average "
            f"(1, 5, 15 min) when each part ended: {loads}. The machine is shared: compare "
            "ratios within one interleaved run, not milliseconds across runs.")


def main() -> None:
    wanted = sys.argv[1:] or list(PARTS)
    unknown = [p for p in wanted if p not in PARTS]
    if unknown:
        raise SystemExit(f"unknown part(s) {unknown}; use {sorted(PARTS)}")
    results = {part: data for part in wanted if (data := load(part)) is not None}
    if not results:
        raise SystemExit("no results in build/bench/: run `make bench` first")
    print(header(results))
    for part, data in results.items():
        print()
        print(PARTS[part](data))


if __name__ == "__main__":
    main()
