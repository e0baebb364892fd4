"""Markdown for the benchmarks' results (one format for every command; no Django here).

Each function takes what a benchmark saved (``build/bench/<part>.json``) and returns its
tables; the benchmarks print them when they finish and bench/report.py prints them all again at
the end of ``make bench`` / ``make bench-peers``.
"""

from __future__ import annotations

from typing import Any

from bench.common import X_FLOOR, num, server_tables, table
from bench.floor import STEPS_PER_TURN

WINDOW = 15  # asks per point of the growth curve (bench/growth.py)
CHECKS = 20  # compaction checks timed after the last ask (bench/growth.py)
INLINE, BACKGROUND = "inline", "background"


#: The label of the write path's row starts so (bench/step_overhead.py).
WRITE_PATH = "turnkit-django write path alone"


def steps(data: dict[str, Any]) -> str:
    """Per step against the floor (bench/step_overhead.py), PostgreSQL or SQLite."""
    systems = data["systems"]
    server = all("server" in s for s in systems.values())
    where = f"; server columns from {data['stats_turns']} turns" if server else ""
    out = [f"**Per step, {data['version']}** ({data['rounds']} interleaved rounds of workload "
           f"T, median{where})", ""]
    if server:
        out.append(server_tables(list(systems.values())))
    else:
        rows = [[s["label"], num(s["median"], 3), f"{s['ratio']:.1f}",
                 num(s["client"]["statements"]), num(s["client"]["round_trips"] / STEPS_PER_TURN,
                                                      1),
                 num(s["client"]["transactions"]), num(s.get("cpu_ms"), 2)]
                for s in systems.values()]
        out.append(table(["system", "ms/step", X_FLOOR, "statements/turn (client)",
                          "sent/step (client)", "transactions/turn (client)",
                          "CPU ms/step (one process)"], rows, right=range(1, 7)))
    split_ = systems[INLINE].get("split")
    if split_:
        inline, background = systems[INLINE]["client"], systems[BACKGROUND]["client"]
        out += ["", f"Client side (Django's connection): inline {inline['statements']} "
                f"statements + {inline['round_trips'] - inline['statements']} BEGIN/COMMIT/"
                f"savepoints per turn, {inline['transactions']} transactions; background "
                f"{background['statements']} + "
                f"{background['round_trips'] - background['statements']}, "
                f"{background['transactions']} transactions. One inline turn: {split_['model']} "
                f"statements per model step, {split_['tool']} per tool call, "
                f"{split_['setup']} to create and claim it; {split_['setup_commits']} + "
                f"{split_['step_commits']} transactions (explicit or autocommit)."]
    if any(s["label"].startswith(WRITE_PATH) for s in systems.values()):
        out += ["", "The write path alone sends the statements an inline turn's steps sent, "
                "built by the store from the writes recorded in one real turn, each replayed "
                "turn on a scratch copy of that turn (bench/write_path.py): what the agent loop "
                "adds is the difference to the inline row. Its WAL and full-page images include "
                "the first change of the scratch turns' pages, written before the block: compare "
                "its time and statements, not its WAL."]
    return "\n".join(out)


def growth(data: dict[str, Any]) -> str:
    """The growth curves and the compaction check (bench/growth.py)."""
    curves = data["curves"]
    out = [f"**Growth of one conversation** (ask N of {data['asks']}, each ask model, tool, "
           f"model; median of the {WINDOW} asks from N, each right after an ask 1 of a fresh "
           "conversation, against the median of those asks 1)", ""]
    rows = []
    for name, c in curves.items():
        for p in c["points"]:
            ratio = p.get("ratio", p["cpu_ms"] / c["points"][0]["cpu_ms"])
            rows.append([name, p["ask"], num(p["cpu_ms"], 1), f"{ratio:.2f}",
                         num(p["wall_ms"], 1), p["statements"], num(p["message_rows_read"])])
    out.append(table(["curve", "ask", "client CPU ms/ask", "\N{MULTIPLICATION SIGN} ask 1",
                      "wall ms/ask", "statements sent", "message rows read"], rows,
                     right=range(1, 7)))
    rows = [[name, c["check"]["messages"], num(c["check"]["estimated_tokens"]),
             num(c["check"]["estimate_ms"], 2), num(c["check"]["choose_ms"], 2),
             num(c["check"]["check_ms"], 2), "yes" if c["check"]["cut_found"] else "no"]
            for name, c in curves.items()]
    out += ["", f"One compaction check after ask {data['asks']} (median of {CHECKS}; the small "
            f"context: {data['small_context']}):", "",
            table(["curve", "visible messages", "estimated tokens", "estimate ms", "choose ms",
                   "check ms", "cut found"], rows, right=range(1, 6))]
    return "\n".join(out)


def _mean(blocks: list[dict[str, Any]], key: str) -> float:
    return sum(b[key] for b in blocks) / len(blocks)


def throughput(data: dict[str, Any]) -> str:
    """Turns/s against bare tasks/s on Celery workers (bench/throughput.py)."""
    rows = []
    for children, blocks in data["results"].items():
        bare, turns = _mean(blocks["bare"], "per_s"), _mean(blocks["turns"], "per_s")
        three = _mean(blocks["bare3"], "per_s") if blocks.get("bare3") else None
        rows.append([children, num(bare, 1), num(turns, 1), f"{turns / bare:.2f}",
                     "-" if three is None else num(three, 1),
                     "-" if three is None else f"{turns / three:.2f}",
                     num(_mean(blocks["bare"], "statements"), 1),
                     f"{num(_mean(blocks['turns'], 'statements_submit'), 1)} + "
                     f"{num(_mean(blocks['turns'], 'statements_run'), 1)}",
                     f"{sum(b['completed'] for b in blocks['turns'])}/"
                     f"{data['n'] * len(blocks['turns'])}",
                     num(_mean(blocks["turns"], "left"))])
    return "\n".join([
        f"**Background throughput on Celery workers** ({data['n']} tasks or turns of model, "
        f"tool, model queued at once per block, {data['rounds']} blocks each, alternating; one "
        "worker process, prefork; PostgreSQL + Redis)", "",
        table(["children", "bare tasks/s", "turns/s", "turns/s ÷ tasks/s",
               "3-transaction tasks/s", "turns/s ÷ those", "statements/bare task",
               "statements/turn (submit + worker)", "turns completed", "doorbells left/block"],
              rows, right=[0, 1, 2, 3, 4, 5, 6, 7, 9]),
        "", "A 3-transaction task commits as many times as a turn of model, tool, model, "
        "each commit a transaction like the bare task's. "
        "Statements: what the clients sent (BEGIN, COMMIT and Django's health check "
        "included; foreign-key checks not). Doorbells left: `run_turn` messages still queued "
        "when every turn of the block had finished (rung again for turns that waited in the "
        "backlog; each costs a task that finds nothing to claim)."])


def peers(data: dict[str, Any]) -> str:
    """The peers side by side (bench/peers.py)."""
    versions = sorted({f"{k} {v}" for s in data["systems"].values()
                       for k, v in s["versions"].items()})
    return "\n".join([
        f"**Peers, PostgreSQL {data['settings']['server_version']}** ({data['rounds']} "
        "interleaved rounds of workload T, median; server columns from "
        f"{data['stats_turns']} turns of each system alone)", "",
        server_tables(list(data["systems"].values())), "", "Versions: " + ", ".join(versions)])


__all__ = ["CHECKS", "WINDOW", "growth", "peers", "steps", "throughput"]


def inflight(data: dict[str, Any]) -> str:
    """Many live turns on one threads worker with a capped pool (bench/inflight.py)."""
    rows = [[b["turns"], b["concurrency"], b["pool"], num(b["seconds"], 1),
             num(b["ran_seconds"], 1), f"{b['completed']}/{b['turns']}", b["recovered"],
             b["peak_sessions"], num(b["peak_rss_mb"]), num(b["left"])] for b in data["blocks"]]
    model = data["model_seconds"]
    return "\n".join([
        f"**Live turns on one worker** (turns of model ({model:g} s), tool, model ({model:g} s) "
        "queued at once; one `celery worker --pool threads` process; Django's connection pool; "
        "PostgreSQL + Redis)", "",
        table(["turns", "threads", "pool max_size", "s from worker start to last completion",
               "s first start to last completion", "completed", "recovered",
               "peak worker sessions", "peak worker RSS MB", "doorbells left"], rows,
              right=[0, 1, 2, 3, 4, 6, 7, 8, 9]),
        "", f"The floor is {2 * model:g} s (two model calls per turn). Peak sessions: "
        "the worker's role in `pg_stat_activity`, sampled every 50 ms."])


def tenants(data: dict[str, Any]) -> str:
    """One tenant's burst against another tenant's single turn (bench/tenants.py)."""
    bound, b = data["bound_seconds"], data["b_seconds"]
    drained = data["a_drain_seconds"]
    rows = [[data["turns"], data["concurrency"], data["threads"], num(bound, 2), num(b, 2),
             f"{b / bound:.2f}", data["a_pending_at_b"], data["a_completed_before_b"],
             data["a_peak_running"], f"{data['a_completed']}/{data['turns']}",
             "-" if drained is None else num(drained, 1)]]
    return "\n".join([
        f"**Fairness between tenants** (`TENANT_LIMITS` concurrency {data['concurrency']}; "
        f"turns of one model call ({data['model_seconds']:g} s); tenant a submits its burst, "
        "then tenant b one turn; one `celery worker --pool threads` process, Django's "
        f"connection pool of {data['pool']}; PostgreSQL + Redis)", "",
        table(["a's turns", "limit", "threads", "one turn alone s (bound)",
               "b's turn s", "b ÷ bound", "a pending at b's submission",
               "a completed before b", "a's peak running", "a completed",
               "a's burst drained s"], rows, right=range(0, 11)),
        "", "Times by the database clock, submission to completion. The bound is the median "
        "of three turns submitted alone; a's peak running is sampled every 50 ms."])


def streaming(data: dict[str, Any]) -> str:
    """One inline turn streamed and not streamed (bench/streaming.py)."""
    systems = data["systems"]
    rows = [[name, s["statements"], num(s["statements"] / STEPS_PER_TURN, 1),
             " ".join(str(n) for n in s["steps"]), s["setup"], num(s["sent"] / STEPS_PER_TURN, 1),
             f"{s['text_deltas']} + {s['deltas'] - s['text_deltas']}", num(s["median"], 3),
             num(s.get("cpu_ms"), 2)]
            for name, s in systems.items()]
    same = len({(s["statements"], tuple(s["steps"]), s["sent"]) for s in systems.values()}) == 1
    return "\n".join([
        f"**Streaming, {data['version']}** (workload T inline with `on_delta=`, the answer in "
        f"up to {data['chunks']} text chunks, `TURNKIT[\"STREAMING\"]` on and off; client side; "
        f"{data['rounds']} interleaved rounds, median)", "",
        table(["turn", "statements/turn", "statements/step", "statements of each step",
               "create + claim", "sent/step", "deltas/turn (text + tool arguments)", "ms/step",
               "CPU ms/step"], rows, right=[1, 2, 4, 5, 6, 7, 8]),
        "", "Streaming adds " + ("no statement to any step." if same else
                                 "statements: the counts above differ.")])


def kill(data: dict[str, Any]) -> str:
    """SIGKILL of a threads worker holding live turns; a second worker finishes them
    (bench/kill.py)."""
    d, model = data, data["model_seconds"]
    rows = [[d["turns"], d["concurrency"], d["pool"], d.get("held_at_kill", "?"), d["live_at_kill"],
             d["completed_at_kill"],
             num(d["seconds_after_kill"], 1), num(d["seconds_after_second_start"], 1),
             f"{d['completed']}/{d['turns']}", d["recovered"], d["unsafe_run_twice"],
             d["committed_requested_again"],
             "pass" if d["verify_ok"] else f"FAIL ({d['violation_count']})"]]
    return "\n".join([
        f"**SIGKILL at live turns** (turns of model ({model:g} s), a tool that is not "
        f"replay-safe, model ({model:g} s); one `celery worker --pool threads` process, "
        f"Django's connection pool; SIGKILL once {d['kill_at']:.0%} of the turns requested model "
        f"call {d.get('kill_step', 1)} (0 is the first), {num(d['seconds_to_kill'], 1)} s after "
        f"its start; a second worker "
        f"then; lease {d['lease']:g} s, heartbeat {d['heartbeat']:g} s; PostgreSQL + Redis)", "",
        table(["turns", "threads", "pool max_size", "held at the kill", "live at the kill",
               "completed at the kill", "s from kill to last completion",
               "s from 2nd worker start", "completed",
               "recovered", "not-replay-safe tools run twice",
               "committed model responses requested again", "invariant checker"], rows,
              right=range(0, 12)),
        "", f"Held at the kill: turns started and not finished; live: those of them in a model "
        f"call whose response was not committed. The "
        f"invariant checker checked {d['verify_turns']} turns in {d['verify_conversations']} "
        f"conversations; the ledger holds {d['effects']} tool effects and "
        f"{d['model_requests']} model requests; {d['turns_without_effect']} turn(s) without an "
        f"effect (tool executions by status: {d['tool_statuses']}). Peak worker sessions "
        f"{d['peak_sessions']}, first worker's RSS at the kill {num(d['rss_at_kill_mb'])} MB."])


def history(data: dict[str, Any]) -> str:
    """The same operations with active turns alone and after the finished history
    (bench/history.py); the plan of the heaviest statement of the worst one."""
    rows, worst = [], None
    for op in data["operations"]:
        a, g = op["active"], op["grown"]
        cells = [op["name"]]
        for key in ("wall_ms", "server_ms"):
            ratio = g[key] / a[key] if a.get(key) and g.get(key) is not None else None
            cells += [num(a.get(key), 2), num(g.get(key), 2),
                      "-" if ratio is None else f"{ratio:.2f}",
                      "-" if ratio is None else ("yes" if ratio <= 1.5 else "**no**")]
            if key == "server_ms" and ratio is not None and (worst is None or ratio > worst[0]):
                worst = (ratio, op)
        rows.append(cells)
    active, finished = num(data["active"]), num(data["finished"])
    rows_grown = ", ".join(f"{t} {num(n)}" for t, n in data["rows"]["grown"].items())
    base = num(data.get("base_finished", 0))
    out = [f"**History** ({active} active turns and {base} finished ones, then with {finished} "
           f"finished turns added by SQL; medians of {data['reps']}; server ms: the heaviest "
           "statement's `EXPLAIN ANALYZE` Execution Time)", "",
           table(["operation", "wall ms active", f"wall ms +{finished}", "ratio", "≤ 1.5",
                  "server ms active", f"server ms +{finished}", "ratio", "≤ 1.5"], rows,
                 right=range(1, 9)),
           "", f"Rows after: {rows_grown}; database {data['database_size']}; generated in "
           f"{data['generate_seconds']['finished']:.0f} s."]
    if worst is not None:
        op = worst[1]
        out += ["", f"Heaviest statement of the worst ratio ({op['name']}, "
                f"ratio {worst[0]:.2f}), with {finished} finished turns:", "", "```",
                op["grown"]["heaviest"][:2000], "", op["grown"]["plan"], "```"]
    return "\n".join(out)


def _families(statements: list[dict[str, Any]]) -> dict[str, list[float]]:
    """calls and total ms per statement family (bench/wal_breakdown.py); statements run inside
    others (their time also counted in the outer one's) marked "(nested)"."""
    out: dict[str, list[float]] = {}
    for s in statements:
        key = s["family"] + ("" if s["toplevel"] else " (nested)")
        calls, ms = out.setdefault(key, [0, 0.0])
        out[key] = [calls + s["calls"], ms + s["ms"]]
    return out


def wal(data: dict[str, Any]) -> str:
    """Where an inline turn's WAL and server time go (bench/wal_breakdown.py)."""
    n, warm, cold = data["turns"], data["warm"], data["cold"]
    head = (f"**Where an inline turn's WAL and server time go** (per turn; warm: {n} inline "
            f"turns of workload T in steady state, cold: {n} right after a CHECKPOINT, first: "
            "the first turn after a CHECKPOINT)")
    blocks = [warm, cold, data["first"]]

    def row(label: str, value: Any, digits: int = 0) -> list[str]:
        return [label] + [num(value(b) / b["turns"], digits) for b in blocks]

    def plan_ms(b: dict[str, Any]) -> float:
        return float(sum(st["plan_ms"] for st in b["statements"]))

    def exec_ms(b: dict[str, Any]) -> float:
        return float(sum(st["ms"] for st in b["statements"] if st["toplevel"]))

    summary = table(
        ["per turn", "warm", "cold", "first"],
        [row("WAL bytes (LSN distance)", lambda b: b["wal"]),
         row("of which records", lambda b: b["record_bytes"]),
         row("of which full-page images", lambda b: b["by_record"].get(
             "full-page images", [0, 0])[0]),
         row("of which padding and page headers", lambda b: b["wal"] - b["record_bytes"]),
         row("WAL records", lambda b: b["records"], 1),
         row("full-page images (count)", lambda b: b["fpi"], 1),
         row("commits", lambda b: b["xacts"], 1),
         row("WAL writes / syncs", lambda b: b["wal_io"][0], 1)[:1]
         + [f"{num(b['wal_io'][0] / b['turns'], 1)} / {num(b['wal_io'][1] / b['turns'], 1)}"
            for b in blocks],
         row("WAL write + sync ms", lambda b: b["wal_io"][2] + b["wal_io"][3], 2),
         row("backend CPU ms (schedstat)", lambda b: b["server_cpu_ms"], 2),
         row("user / system ms (clock ticks)", lambda b: 0)[:1]
         + [f"{num(b['server_user_ms'] / b['turns'], 2)} / "
            f"{num(b['server_sys_ms'] / b['turns'], 2)}" for b in blocks],
         row("statements' execution ms (top level)", exec_ms, 3),
         row("statements' planning ms", plan_ms, 3)],
        right=(1, 2, 3))
    rel_rows = []
    for name, (size, fpi, records) in warm["by_relation"].items():
        cold_size = cold["by_relation"].get(name, [0, 0, 0])
        rel_rows.append([name, num(size / n), num(records / n, 1), num(fpi / n),
                         num(cold_size[0] / n), num(cold_size[1] / n)])
    relations = table(["relation (first block of the record)", "B/turn", "records/turn",
                       "of which FPI B", "cold B/turn", "cold FPI B"], rel_rows,
                      right=range(1, 6))
    tab_wal = table(
        ["table with its indexes and TOAST", "B/turn", "of which the table itself", "cold B/turn"],
        [[name, num(size / n), num(heap / n), num(cold["by_table"].get(name, [0, 0])[0] / n)]
         for name, (size, heap) in warm["by_table"].items()], right=(1, 2, 3))
    names = list(warm["by_record"]) + [k for k in cold["by_record"] if k not in warm["by_record"]]
    rec_rows = [[name, num(warm["by_record"].get(name, [0, 0])[0] / n),
                 num(warm["by_record"].get(name, [0, 0])[1] / n, 1),
                 num(cold["by_record"].get(name, [0, 0])[0] / n)] for name in names]
    records = table(["record type (FPI bytes apart)", "B/turn", "records/turn", "cold B/turn"],
                    rec_rows, right=(1, 2, 3))
    pairs = table(["relation and record type (warm, FPI apart), top 15", "B/turn", "records/turn",
                   "B/record"],
                  [[name, num(size / n), num(count / n, 1), num(size / count if count else 0)]
                   for name, (size, count) in list(warm["by_pair"].items())[:15]],
                  right=(1, 2, 3))
    fam = _families(warm["statements"])
    top = sorted(fam.items(), key=lambda kv: -kv[1][1])[:10]
    top_level_ms = sum(s["ms"] for s in warm["statements"] if s["toplevel"])
    fk = [v for k, v in fam.items() if k.startswith("FK check")]
    stmt_rows = [[f"`{k}`", num(c / n, 1), num(ms / c if c else 0, 3), num(ms / n, 3)]
                 for k, (c, ms) in top]
    stmts = table(["statement family (warm)", "calls/turn", "ms/call", "ms/turn"], stmt_rows,
                  right=(1, 2, 3))
    stmt_note = (f"Top-level statements' server time: {num(top_level_ms / n, 3)} ms/turn; "
                 f"foreign-key checks {num(sum(c for c, _ in fk) / n, 1)} a turn, "
                 f"{num(sum(ms for _, ms in fk) / n, 3)} ms/turn.")
    tab_rows = [[name, num(warm["inserted"].get(name, 0) / n, 1),
                 num(upd / n, 1), num(warm["hot"].get(name, 0) / n, 1)]
                for name, upd in sorted(warm["updated"].items())
                if upd or warm["inserted"].get(name)]
    tables = table(["table (warm)", "inserted/turn", "updated/turn", "of which HOT"], tab_rows,
                   right=(1, 2, 3))
    events = "Event rows per turn by type: " + ", ".join(
        f"{kind} {num(count, 1)}" for kind, count in data.get("events", {}).items()) + "."
    return "\n\n".join([head, summary, tab_wal, relations, records, pairs, stmts, stmt_note,
                        tables, events])
