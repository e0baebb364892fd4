"""Growth: what ask N of one conversation costs as the conversation grows.

Run with ``make bench`` (throwaway PostgreSQL). Two curves of ``conv.ask()`` (each ask a turn of
model, tool, model with an instant ``FunctionClient``):

* compaction off (the agent's ``compaction=False``), tool-call ids fresh in every response;
* automatic compaction on, with a small context (``bench.workload.SMALL_CONTEXT``) so that the
  check runs at every model step after the first few dozen asks, and the model reusing tool-call
  ids across turns (``call_0`` in every turn, as some OpenAI-compatible servers do).

At ask 1, 10, 50 and 200 it reports the client CPU per ask (``time.process_time``: this process
only, not the server's) and the wall time, as the median of the asks starting there, each timed
right after an ask 1 of a fresh conversation (the ratio is to those asks 1); the statements the
ask after them sent and the
``turnkit_message`` rows its SELECTs returned (``pg_stat_statements``); and, at the last ask,
the time of one compaction check: ``runtime.compaction.estimate`` of the next request and
``choose`` over the visible transcript, as automatic compaction runs them before a model call.

Writes ``build/bench/growth.json`` and prints a markdown table. Nothing is asserted.
"""

from __future__ import annotations

import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import django

django.setup()

from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench import pgstats, render  # noqa: E402
from bench.common import save  # noqa: E402
from bench.render import CHECKS, WINDOW  # noqa: E402
from bench.workload import CHAT, CHAT_COMPACTING, SMALL_CONTEXT  # noqa: E402
from turnkit_django import Agent  # noqa: E402
from turnkit_django.agents.compaction import options_for  # noqa: E402
from turnkit_django.api.handles import ConversationHandle  # noqa: E402
from turnkit_django.runtime.compaction import choose, estimate  # noqa: E402
from turnkit_django.store.transcript import visible_chat  # noqa: E402


def ask(conv: ConversationHandle, n: int) -> tuple[float, float]:
    """Ask once; return (client CPU ms, wall ms)."""
    cpu, wall = time.process_time(), time.perf_counter()
    turn = conv.ask(f"Question {n}: what does the probe say?")
    cpu, wall = (time.process_time() - cpu) * 1000, (time.perf_counter() - wall) * 1000
    if turn.status != "completed":
        raise SystemExit(f"ask {n} ended {turn.status}: {turn.error}")
    return cpu, wall


def observed_ask(conv: ConversationHandle, n: int, observer: pgstats.Observer,
                 database: str) -> dict[str, int]:
    """Ask once with the server counting: statements sent, message rows read."""
    observer.reset_statements()
    ask(conv, n)
    rows = observer.execute(
        "SELECT s.toplevel, s.calls, s.rows, s.query FROM pg_stat_statements s "
        "JOIN pg_database d ON d.oid = s.dbid WHERE d.datname = %s", [database])
    sent = sum(calls for top, calls, _, query in rows if top and "FOR KEY SHARE OF x" not in query)
    read = sum(r for _, _, r, query in rows
               if query.lstrip().upper().startswith("SELECT") and '"turnkit_message"' in query
               and "FOR KEY SHARE" not in query)
    return {"statements": sent, "message_rows_read": read}


def compaction_check(conv: ConversationHandle, agent: Agent) -> dict[str, float]:
    """Time estimate() and choose() as automatic compaction runs them before the next call."""
    conv.say("One more question.")
    pending = conv.prepare_turn()
    request = pending.preview()
    visible = visible_chat(pending.row)
    merged = options_for(agent.name, agent.compaction) or options_for(agent.name, True)
    assert merged is not None
    keep = int(merged["tail_messages"])
    timings: dict[str, list[float]] = {"estimate": [], "choose": []}
    found = None
    for _ in range(CHECKS):
        start = time.perf_counter()
        estimate(request)
        timings["estimate"].append((time.perf_counter() - start) * 1000)
        start = time.perf_counter()
        found = choose(visible, keep)
        timings["choose"].append((time.perf_counter() - start) * 1000)
    est, cho = statistics.median(timings["estimate"]), statistics.median(timings["choose"])
    return {"messages": len(visible), "estimate_ms": est, "choose_ms": cho,
            "check_ms": est + cho, "cut_found": found is not None,
            "estimated_tokens": estimate(request)}


def curve(agent: Agent, asks: int, points: list[int], observer: pgstats.Observer,
          database: str) -> dict[str, Any]:
    """Grow one conversation to ``asks``; at each point, ``WINDOW`` asks of it alternate with
    asks 1 of fresh conversations, so that the ratio compares asks timed side by side (this
    machine's speed drifts by tens of percent between seconds)."""
    for _ in range(WINDOW):  # warm the process up
        ask(agent.conversation(), 1)
    conv: ConversationHandle = agent.conversation()
    rows = []
    n = 0
    for point in points:
        while n < point - 1:
            n += 1
            ask(conv, n)
        firsts, samples = [], []
        for _ in range(WINDOW):
            firsts.append(ask(agent.conversation(), 1))
            n += 1
            samples.append(ask(conv, n) if point > 1 else ask(agent.conversation(), 1))
        n += 1
        observed = observed_ask(conv, n, observer, database)
        first = statistics.median(c for c, _ in firsts)
        cpu = statistics.median(c for c, _ in samples)
        wall = statistics.median(w for _, w in samples)
        rows.append({"ask": point, "cpu_ms": cpu, "wall_ms": wall, "ask1_cpu_ms": first,
                     "ratio": cpu / first, **observed})
    return {"agent": agent.name, "points": rows, "check": compaction_check(conv, agent)}


def main() -> None:
    asks = int(os.environ.get("BENCH_GROWTH_ASKS", "200"))
    points = sorted({p for p in (1, 10, 50, 200, asks) if p <= asks})
    call_command("migrate", verbosity=0)
    if connection.vendor != "postgresql":
        raise SystemExit("the growth curve reads pg_stat_statements: run it on PostgreSQL")
    url = os.environ["TURNKIT_BENCH_DATABASE_URL"]
    observer = pgstats.Observer(url)
    database = pgstats.database_of(url)
    curves = {
        "compaction off": curve(CHAT, asks, points, observer, database),
        "compaction on, tool-call ids reused": curve(CHAT_COMPACTING, asks, points, observer,
                                                     database),
    }
    observer.close()
    data = {"asks": asks, "small_context": SMALL_CONTEXT, "curves": curves}
    save("growth", data)
    print(render.growth(data))


if __name__ == "__main__":
    main()
