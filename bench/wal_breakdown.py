"""Where an inline turn's WAL and PostgreSQL server time go (``scripts/bench.sh wal``).

Runs ``BENCH_WAL_TURNS`` (100) inline turns of workload T twice: right after a CHECKPOINT (cold:
each page's first change pays a full-page image) and again in steady state (warm: the numbers
reported without a qualifier), after ``BENCH_WAL_WARMUP`` (5) warm-up turns. Per turn:

* WAL bytes by relation (each table, index and TOAST relation by name) and by record type
  (``Heap/INSERT``, ``Heap/HOT_UPDATE``, ``Btree/INSERT_LEAF``, ``Transaction/COMMIT`` ...),
  full-page images apart, read with ``pg_walinspect`` (PostgreSQL 15+) between the LSNs before
  and after the block. A record is counted under the relation of its first block reference;
  records without one (commits) under ``-``. The difference between the LSN distance and the
  records' lengths is alignment padding and WAL page headers.
* Server time per statement family from ``pg_stat_statements`` (``total_exec_time``; a
  statement's time includes the statements run inside it, such as immediate foreign-key checks),
  deferred foreign-key checks (``SELECT 1 FROM ONLY ... FOR KEY SHARE``, run at COMMIT) apart;
  and the CPU of the turns' backend (``/proc``).
* Rows inserted and updated per table, HOT updates apart (``pg_stat_user_tables``).

Writes ``build/bench/wal.json`` and prints markdown tables (``bench/render.py``). A benchmark,
not a test: nothing is asserted.
"""

from __future__ import annotations

import os
import re
import sys
from collections import Counter
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "bench.settings")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import django

django.setup()

import psycopg  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import connection  # noqa: E402

from bench import pgstats, render  # noqa: E402
from bench.common import save  # noqa: E402
from bench.workload import T5  # noqa: E402

PREFIX = "turnkit_"
_BLOCK = re.compile(r"rel (\d+)/(\d+)/(\d+)")
_TABLE = re.compile(r'"?(turnkit_\w+)"?')
_FK = re.compile(r'FROM ONLY "?\w*"?\.?"?(\w+)"? x WHERE')


def inline_turn() -> None:
    run = T5.run("bench")
    if run.status != "completed":
        raise SystemExit(f"the inline turn ended {run.status}: {run.error}")


def backend_pid() -> int:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        return int(cursor.fetchone()[0])


def cpu_split(pid: int) -> tuple[float, float, float]:
    """CPU seconds the server process ``pid`` ran so far (/proc/<pid>/schedstat, nanoseconds),
    and its user and system seconds (/proc/<pid>/stat, in clock ticks: coarse)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    tick = os.sysconf("SC_CLK_TCK")
    ran = int(Path(f"/proc/{pid}/schedstat").read_text().split()[0]) / 1e9
    return ran, int(fields[11]) / tick, int(fields[12]) / tick


def wal_io(observer: pgstats.Observer) -> tuple[int, int, float, float]:
    """pg_stat_wal's writes, syncs and their milliseconds (``track_wal_io_timing``)."""
    observer.execute("SELECT pg_stat_clear_snapshot()")
    row = observer.execute("SELECT wal_write, wal_sync, wal_write_time, wal_sync_time "
                           "FROM pg_stat_wal")[0]
    return int(row[0]), int(row[1]), float(row[2]), float(row[3])


def relation_names(url: str) -> tuple[int, dict[int, tuple[str, str]]]:
    """The database's OID, and relfilenode -> (name, table it belongs to) of every relation of
    it (a TOAST table and its index named after their table)."""
    with psycopg.connect(url, autocommit=True) as conn:
        row = conn.execute(
            "SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
        assert row is not None
        oid = int(row[0])
        rows = conn.execute(
            "SELECT pg_relation_filenode(c.oid), c.relname, c.relkind, toasted.relname, "
            "  indexed.relname "
            "FROM pg_class c "
            "LEFT JOIN pg_index i ON i.indexrelid = c.oid "
            "LEFT JOIN pg_class indexed ON indexed.oid = i.indrelid "
            "LEFT JOIN pg_class toasted ON toasted.reltoastrelid IN (c.oid, i.indrelid) "
            "WHERE pg_relation_filenode(c.oid) IS NOT NULL").fetchall()
    names = {}
    for node, name, kind, toasted, indexed in rows:
        if toasted is not None:
            names[int(node)] = (f"{toasted} (TOAST{' index' if kind == 'i' else ''})", toasted)
        else:
            names[int(node)] = (name, indexed or name)
    return oid, names


def wal_records(observer: pgstats.Observer, start: str, end: str, database: int,
                names: dict[int, tuple[str, str]]) -> dict[str, Any]:
    """Bytes of the WAL between ``start`` and ``end`` by relation and by record type."""
    rows = observer.execute(
        "SELECT resource_manager, record_type, record_length, fpi_length, block_ref "
        "FROM pg_get_wal_records_info(%s, %s)", [start, end])
    by_relation: Counter[str] = Counter()
    by_table: Counter[str] = Counter()
    heap_of: Counter[str] = Counter()
    pairs: Counter[str] = Counter()
    pair_count: Counter[str] = Counter()
    by_relation_fpi: Counter[str] = Counter()
    by_record: Counter[str] = Counter()
    records_of: Counter[str] = Counter()
    count_of: Counter[str] = Counter()
    fpi = fpi_count = total = 0
    for manager, kind, length, fpi_length, block_ref in rows:
        match = _BLOCK.search(block_ref or "")
        if match is None:
            relation = table = "-"
        elif int(match.group(2)) != database:
            relation = table = "(other database)" if int(match.group(2)) else "(shared catalog)"
        else:
            relation, table = names.get(int(match.group(3)),
                                        (f"(relfilenode {match.group(3)})", "?"))
        by_table[table] += length
        if relation == table:
            heap_of[table] += length
        record = f"{manager}/{kind.removesuffix('+INIT')}"
        by_relation[relation] += length
        by_relation_fpi[relation] += fpi_length or 0
        by_record[record] += length - (fpi_length or 0)
        pairs[f"{relation} {record}"] += length - (fpi_length or 0)
        pair_count[f"{relation} {record}"] += 1
        records_of[relation] += 1
        count_of[record] += 1
        if fpi_length:
            fpi += fpi_length
            fpi_count += block_ref.count("FPW")
        total += length
    if fpi:
        by_record["full-page images"] = fpi
        count_of["full-page images"] = fpi_count
    return {"records": len(rows), "record_bytes": total,
            "by_relation": {k: [v, by_relation_fpi[k], records_of[k]]
                            for k, v in by_relation.most_common()},
            "by_pair": {k: [v, pair_count[k]] for k, v in pairs.most_common()},
            "by_table": {k: [v, heap_of[k]] for k, v in by_table.most_common()},
            "by_record": {k: [v, count_of[k]] for k, v in by_record.most_common()}}


def family(query: str) -> str:
    """A statement's family: its verb and the first turnkit table it names."""
    fk = _FK.search(query)
    if "FOR KEY SHARE OF x" in query and fk:
        return f"FK check -> {fk.group(1)}"
    words = query.split(None, 1)
    verb = words[0].upper() if words else "?"
    tables = list(dict.fromkeys(_TABLE.findall(query)))
    if verb == "WITH":
        writes = [w for w in ("INSERT", "UPDATE", "DELETE") if w in query.upper()]
        return f"WITH ({'/'.join(writes) or 'SELECT'}) {', '.join(map(short, tables))}"
    return f"{verb} {tables[0]}" if tables else verb


def short(name: str) -> str:
    return name.replace(PREFIX, "")


def statement_times(observer: pgstats.Observer, database: str) -> list[dict[str, Any]]:
    rows = observer.execute(
        "SELECT s.toplevel, s.calls, s.total_exec_time, s.rows, s.query, s.plans, "
        "  s.total_plan_time "
        "FROM pg_stat_statements s JOIN pg_database d ON d.oid = s.dbid "
        "WHERE d.datname = %s", [database])
    return [{"toplevel": top, "calls": calls, "ms": ms, "rows": n, "query": query,
             "family": family(query), "plans": plans, "plan_ms": plan_ms}
            for top, calls, ms, n, query, plans, plan_ms in rows
            if not any(own in query for own in pgstats._OWN)]


def block(observer: pgstats.Observer, database: str, url: str, turns: int, *,
          checkpoint: bool) -> dict[str, Any]:
    pgstats.flush(connection)  # the turns before the block are published before its reset
    watch = pgstats.TableWatch(url, PREFIX)
    pid = backend_pid()
    flushes = [pgstats.flusher(connection)]
    io = wal_io(observer)
    try:
        with pgstats.measured(observer, database, tables=watch, checkpoint=checkpoint,
                              flush_with=flushes) as out:
            start = observer.scalar("SELECT pg_current_wal_insert_lsn()::text")
            cpu = cpu_split(pid)
            for _ in range(turns):
                inline_turn()
            cpu_after = cpu_split(pid)
            end = observer.scalar("SELECT pg_current_wal_insert_lsn()::text")
            statements = statement_times(observer, database)
    finally:
        watch.close()
    io_after = wal_io(observer)  # after the block's flush: the backend published its WAL I/O
    measured = out[0]
    oid, names = relation_names(url)
    wal = wal_records(observer, start, end, oid, names)
    tables = measured.tables
    assert tables is not None
    return {
        "wal": int(observer.scalar("SELECT pg_wal_lsn_diff(%s, %s)", [end, start])),
        "fpi": measured.wal_fpi, "xacts": measured.xact_commit,
        "turns": turns, "server_cpu_ms": (cpu_after[0] - cpu[0]) * 1000,
        "server_user_ms": (cpu_after[1] - cpu[1]) * 1000,
        "server_sys_ms": (cpu_after[2] - cpu[2]) * 1000,
        "wal_io": [after - before for before, after in zip(io, io_after, strict=True)],
        **wal,
        "statements": statements,
        "inserted": tables.inserted, "updated": tables.updated, "hot": tables.hot,
    }


def events_per_turn() -> dict[str, float]:
    """Event rows per turn by type, over every turn the database holds (all alike)."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM turnkit_turn")
        turns = int(cursor.fetchone()[0])
        cursor.execute("SELECT type, count(*) FROM turnkit_event GROUP BY type ORDER BY type")
        return {kind: count / turns for kind, count in cursor.fetchall()}


def main() -> None:
    turns = int(os.environ.get("BENCH_WAL_TURNS", "100"))
    warmup = int(os.environ.get("BENCH_WAL_WARMUP", "5"))
    url = os.environ["TURNKIT_BENCH_DATABASE_URL"]
    if connection.vendor != "postgresql":
        raise SystemExit("the wal part needs PostgreSQL")
    call_command("migrate", verbosity=0)
    observer = pgstats.Observer(url)
    # planning time per statement and the time of WAL writes and syncs (this throwaway server's
    # configuration only)
    for setting in ("pg_stat_statements.track_planning", "track_wal_io_timing"):
        observer.execute(f"ALTER SYSTEM SET {setting} = on")
    observer.execute("SELECT pg_reload_conf()")
    try:
        observer.execute("CREATE EXTENSION IF NOT EXISTS pg_walinspect")
    except psycopg.Error as exc:
        raise SystemExit(f"pg_walinspect is not available ({exc}); it ships with PostgreSQL 15+ "
                         "(contrib): use `pg_waldump --stats=record` on the WAL directory") from exc
    database = pgstats.database_of(url)
    for _ in range(warmup):
        inline_turn()
    first = block(observer, database, url, 1, checkpoint=True)
    cold = block(observer, database, url, turns, checkpoint=True)
    observer.checkpoint()
    for _ in range(warmup):  # each page's first change after the CHECKPOINT is paid here
        inline_turn()
    warm = block(observer, database, url, turns, checkpoint=False)
    data = {"turns": turns, "warmup": warmup, "settings": observer.settings(),
            "first": first, "cold": cold, "warm": warm, "events": events_per_turn()}
    observer.close()
    save("wal", data)
    print(render.wal(data))


if __name__ == "__main__":
    main()
