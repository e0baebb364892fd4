"""The write path's schema on PostgreSQL (issue 11): only indexes something reads, HOT updates.

Migration 0008 says why each index exists; these tests keep the database to what it says, so a
later migration that brings back an index nothing reads (Django's ``_like`` companions, a plain
foreign-key index a composite one covers) or drops one the guarantees need fails here.
"""

from __future__ import annotations

import pytest
from django.db import connection

from turnkit_django import Agent, tool
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif("connection.vendor != 'postgresql'")]


def indexes(table: str) -> dict[str, str]:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename = %s", [table])
        return dict(cursor.fetchall())


def columns_indexed(table: str) -> list[str]:
    """The column lists of ``table``'s indexes, as written in their definitions."""
    return sorted(definition.split(" USING btree ", 1)[1] for definition in indexes(table).values())


def test_no_index_serves_only_like_queries():
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname FROM pg_indexes WHERE tablename LIKE 'turnkit%%'"
                       " AND indexdef LIKE '%%pattern_ops%%'")
        assert cursor.fetchall() == []


def test_each_write_path_table_has_the_indexes_the_migration_names():
    assert columns_indexed("turnkit_message") == [
        "(conversation_id, key) WHERE (NOT ((key)::text = ''::text))",  # 0010: keyed input
        "(conversation_id, sequence)", "(id)",
        "(tool_execution_id) WHERE (tool_execution_id IS NOT NULL)", "(turn_id)"]
    assert columns_indexed("turnkit_toolexecution") == [
        # 0011: the approvals inbox and expiry, over calls that asked for one (the predicate
        # leaves ``status`` out, so status changes stay HOT updates)
        "(created_at DESC, id DESC)",  # 0020: the admin list, newest first
        "(created_at) WHERE ((approval -> 'state'::text) = '\"requested\"'::jsonb)",
        "(id)", "(turn_id, tool_call_id)"]
    assert columns_indexed("turnkit_event") == ["(id)", "(root_turn_id, id)"]  # 0010: cursor
    turn = indexes("turnkit_turn")
    assert "turnkit_one_running_submitted_turn" in turn
    assert "UNIQUE" in turn["turnkit_one_running_submitted_turn"]
    root = [name for name in turn if name.startswith("turnkit_turn_root_turn_id")]
    assert len(root) == 1
    assert sorted(turn) == sorted([
        "turnkit_turn_pkey", "turnkit_turn_conv", "turnkit_turn_running", "turnkit_turn_actionable",
        "turnkit_turn_inline_running", "turnkit_turn_parent_turn", "turnkit_turn_parent_tex",
        "turnkit_one_running_submitted_turn", *root,
        # 0013: partial indexes for metrics and turnkit_stats (live turns by status, turns ended
        # in a window, recovered turns), each holding only the rows it counts
        "turnkit_turn_active", "turnkit_turn_completed", "turnkit_turn_recovered",
        # 0014: a claim counts its tenant's running turns (TENANT_LIMITS; rows with a tenant)
        "turnkit_turn_tenant_running",
        # 0016: the retries of a run, looked up by deleting it (rows that are a retry only)
        "turnkit_turn_retry_of",
        # 0020: the admin list, newest first; 0021: active turns by conversation (prune)
        "turnkit_turn_listed", "turnkit_turn_active_conv"])


def test_the_turn_and_conversation_tables_leave_room_for_hot_updates():
    with connection.cursor() as cursor:
        cursor.execute("SELECT relname, reloptions FROM pg_class"
                       " WHERE relname IN ('turnkit_turn', 'turnkit_conversation')")
        assert dict(cursor.fetchall()) == {"turnkit_turn": ["fillfactor=70"],
                                           "turnkit_conversation": ["fillfactor=70"]}


@tool
def probe(n: int) -> dict[str, int]:
    """Return its input."""
    return {"n": n}


def test_a_steps_updates_of_the_turn_and_conversation_are_hot(registered):
    def respond(request):  # type: ignore[no-untyped-def]
        done = sum(1 for m in request.messages if m.role == "tool")
        return call("probe", n=done) if done < 2 else reply("done")

    agent = registered(Agent("hot", tools=[probe], client=FunctionClient(respond)))
    agent.run("warm up")

    def updates() -> dict[str, tuple[int, int]]:
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_stat_force_next_flush()")
            cursor.execute("SELECT relname, n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables"
                           " WHERE relname IN ('turnkit_turn', 'turnkit_conversation',"
                           " 'turnkit_toolexecution')")
            return {name: (total, hot) for name, total, hot in cursor.fetchall()}

    before = updates()
    for _ in range(5):
        assert agent.run("go").status == "completed"
    after = updates()
    for table in ("turnkit_turn", "turnkit_conversation"):
        total = after[table][0] - before[table][0]
        hot = after[table][1] - before[table][1]
        # Five steps update each row; only the terminal update touches an indexed column.
        assert total == 25, (table, total)
        assert hot >= 20, (table, hot, total)
    # A tool execution is updated twice per call (its start, probe not being replay-safe, and
    # its result); no index covers what moves.
    total, hot = (after["turnkit_toolexecution"][i] - before["turnkit_toolexecution"][i]
                  for i in (0, 1))
    assert total == 20 and hot >= 16, (total, hot)
