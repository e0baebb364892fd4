"""Pinned per-step costs on PostgreSQL (issue 41): statements, rows written and index entries.

Workload T (model, tool, model, tool, model; a fake model and a replay-safe tool, as ``make
bench`` runs it) inline, and the same turn in the background (``submit()`` then the Celery
task's body, ``services.run_turn``). Each figure is pinned exactly, so that a change adding a
statement, a row or an index entry to a step fails here; a change lowering one fails too, so that
the pinned figures (and docs/performance.md) follow the code.

- **Statements**: what Django's connection sent (``CaptureQueriesContext``), transaction control
  (BEGIN, COMMIT, savepoints) counted apart; inline, split into the turn's set-up and its steps
  at the loop's events (``tests/stepcost.py``).
- **Rows written**: ``n_tup_ins``, ``n_tup_upd`` and ``n_tup_del`` of ``pg_stat_user_tables``
  per ``turnkit_`` table, the difference over the turn. Counters reach the shared statistics
  when a backend flushes them (at most once a second): ``pg_stat_force_next_flush()`` on the
  test's connection, the only one writing, makes it flush when it next goes idle, before the
  read (``pg_stat_xact_user_tables`` is no help: a turn is several transactions, and on
  PostgreSQL 15 that view also shows earlier transactions' counts not flushed yet).
- **Index entries**: each insert and each update that is not HOT (``n_tup_upd -
  n_tup_hot_upd``: a HOT update maintains no index) adds one entry to every index of its table,
  summed over the tables. PostgreSQL counts no index insertions itself, so this is the same
  upper bound ``make bench`` reports (a partial index whose predicate the row fails gets none),
  exact in what it counts: a new index, or an update made non-HOT, raises it. HOT is
  deterministic here: every test starts on truncated tables, so each page has room for the new
  row versions (the test truncates them itself too, in case a test before it rolled back).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.stepcost import measure
from turnkit_django import Agent, services, tool
from turnkit_django.services import turns as service_turns
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif("connection.vendor != 'postgresql'"),
              pytest.mark.usefixtures("background")]

STEPS = 5  # workload T

#: Per table: rows inserted, updated (of which HOT) and deleted over one turn, and the index
#: entries those writes added.
Rows = dict[str, dict[str, int]]


def _rows(**tables: tuple[int, int, int, int, int]) -> Rows:
    keys = ("inserted", "updated", "hot", "deleted", "index_entries")
    return {name: dict(zip(keys, values, strict=True)) for name, values in tables.items()}


#: What one turn costs today. When a change moves a figure on purpose, update it here and in
#: the "Pinned per-step costs" paragraph of docs/performance.md.
EXPECTED: dict[str, dict[str, Any]] = {
    "inline": {
        # One statement for the creation with the claim, then one per step, no BEGIN/COMMIT.
        "statements": {"setup": 1, "model": [1, 1, 1], "tool": [1, 1]},
        "transaction_control": 0,
        "rows": _rows(  # table: (inserted, updated, hot, deleted, index entries)
            conversation=(1, 5, 4, 0, 18),
            event=(7, 0, 0, 0, 14),
            lease=(1, 0, 0, 1, 1),  # deleted by the transition that ends the turn
            message=(6, 0, 0, 0, 30),
            toolexecution=(2, 2, 2, 0, 8),
            turn=(1, 5, 4, 0, 32),
        ),
        "rows_written": 31,
        "index_entries": 103,
        "per_step": {"statements": 1.2, "rows_written": 6.2, "index_entries": 20.6},
    },
    "background": {
        # submit(): the conversation, input, turn and event in one statement, then the submit;
        # run_turn: the claim (a read, a guarded update), five one-statement steps (the last
        # the terminal write), one read handing the lane on.
        "statements": {"submit": 2, "run_turn": 8},
        "transaction_control": 0,
        "rows": _rows(
            conversation=(1, 5, 4, 0, 18),
            event=(7, 0, 0, 0, 14),
            lease=(1, 0, 0, 1, 1),
            message=(6, 0, 0, 0, 30),
            toolexecution=(2, 2, 2, 0, 8),
            turn=(1, 7, 4, 0, 64),
        ),
        "rows_written": 33,
        "index_entries": 135,
        "per_step": {"statements": 2.0, "rows_written": 6.6, "index_entries": 27.0},
    },
}

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")

_STATS = (
    "SELECT s.relname, s.n_tup_ins, s.n_tup_upd, s.n_tup_hot_upd, s.n_tup_del, "
    "  (SELECT count(*) FROM pg_index i WHERE i.indrelid = s.relid) "
    "FROM pg_stat_user_tables s WHERE s.relname LIKE %s")


@tool(recovery="replay_safe")
def probe(n: int) -> dict[str, int]:
    """Return its input."""
    return {"n": n}


def five_steps(request: Any) -> Any:  # model, tool, model, tool, model
    done = sum(1 for m in request.messages if m.role == "tool")
    return call("probe", n=done) if done < 2 else reply("done")


def counters() -> dict[str, tuple[int, ...]]:
    """The turnkit tables' counters, this connection's writes flushed first."""
    assert not connection.in_atomic_block, "statistics flush only outside a transaction"
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_stat_force_next_flush()")  # done when idle, before the next
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(_STATS, ["turnkit\\_%"])
        return {name: tuple(values) for name, *values in cursor.fetchall()}


def written(before: dict[str, tuple[int, ...]], after: dict[str, tuple[int, ...]]) -> Rows:
    rows: Rows = {}
    for name, (ins, upd, hot, dele, indexes) in after.items():
        b_ins, b_upd, b_hot, b_del, _ = before.get(name, (0, 0, 0, 0, indexes))
        delta = (ins - b_ins, upd - b_upd, hot - b_hot, dele - b_del)
        if any(delta):
            entries = (delta[0] + delta[1] - delta[2]) * indexes
            rows[name.removeprefix("turnkit_")] = _rows(t=(*delta, entries))["t"]
    return rows


def data(queries: CaptureQueriesContext) -> int:
    """The statements sent other than transaction control."""
    return sum(1 for q in queries.captured_queries if not q["sql"].upper().startswith(_CONTROL))


def summary(statements: dict[str, Any], control: int, rows: Rows) -> dict[str, Any]:
    total = sum(sum(v) if isinstance(v, list) else v for v in statements.values())
    rows_written = sum(r["inserted"] + r["updated"] + r["deleted"] for r in rows.values())
    entries = sum(r["index_entries"] for r in rows.values())
    return {"statements": statements, "transaction_control": control, "rows": rows,
            "rows_written": rows_written, "index_entries": entries,
            "per_step": {"statements": round(total / STEPS, 2),
                         "rows_written": round(rows_written / STEPS, 2),
                         "index_entries": round(entries / STEPS, 2)}}


def assert_pinned(kind: str, measured: dict[str, Any]) -> None:
    assert measured == EXPECTED[kind], (
        f"the {kind} turn's costs moved:\n  measured {measured}\n  pinned   {EXPECTED[kind]}\n"
        "If the change is intended, update EXPECTED in tests/integration/test_step_costs.py "
        "and the 'Pinned per-step costs' paragraph of docs/performance.md; if not, find the "
        "statement, row or index the change added to a step.")


def truncate() -> None:
    """Empty the turnkit tables into fresh files, as a transactional test's teardown does, so
    that no page holds rows (or rolled-back row versions) of an earlier test: HOT needs room on
    the row's page, and the room is then the same at every run."""
    names = [t for t in connection.introspection.table_names() if t.startswith("turnkit_")]
    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE " + ", ".join(connection.ops.quote_name(n) for n in names)
                       + " CASCADE")


@pytest.fixture
def agent(registered) -> Agent:
    truncate()
    agent = registered(Agent("step_costs", tools=[probe], client=FunctionClient(five_steps)))
    assert agent.run("warm up").status == "completed"  # the process's first turn
    return agent


def test_an_inline_turn_costs_what_is_pinned(agent):
    def run(on_event):
        assert agent.run("go", on_event=on_event).status == "completed"

    before = counters()
    cost = measure(run)
    rows = written(before, counters())

    assert [s.kind for s in cost.spans] == ["setup", "model", "tool", "model", "tool", "model"]
    statements = {"setup": len(cost.of("setup")[0].statements),
                  "model": [len(s.statements) for s in cost.of("model")],
                  "tool": [len(s.statements) for s in cost.of("tool")]}
    control = sum(len(s.sql) - len(s.statements) for s in cost.spans)
    assert_pinned("inline", summary(statements, control, rows))


def test_a_background_turn_costs_what_is_pinned(agent, monkeypatch):
    monkeypatch.setattr(service_turns._Maintenance, "due_at", float("inf"))  # no pass due
    assert services.run_turn(agent.prepare("warm up").submit().id, kind="test")

    before = counters()
    with CaptureQueriesContext(connection) as submitting:
        run = agent.prepare("go").submit()
    with CaptureQueriesContext(connection) as running:
        assert services.run_turn(run.id, kind="test")
    rows = written(before, counters())

    sql = [q["sql"] for q in [*submitting.captured_queries, *running.captured_queries]]
    statements = {"submit": data(submitting), "run_turn": data(running)}
    control = len(sql) - statements["submit"] - statements["run_turn"]
    assert_pinned("background", summary(statements, control, rows))
