"""Prune reads active turns through their partial index and deletes without sorting (issue 41).

With history behind it (many finished turns, a few active), a dry-run pass of
:func:`~turnkit_django.store.retention.delete_prunable` looks up the active turns of its
candidate conversations through ``turnkit_turn_active_conv`` (conversation WHERE status is
active) instead of reading every turn; and a pass that deletes issues no ORDER BY but the
candidates' own: the cascade's reads of the rows it deletes neither sort them nor join each
message to its conversation (the message model's default ordering did).
"""

from __future__ import annotations

import re
from datetime import timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.factories import create_terminal_turns
from turnkit_django.models import Conversation, Message, Turn
from turnkit_django.store.retention import delete_prunable

pytestmark = [pytest.mark.django_db, pytest.mark.skipif("connection.vendor != 'postgresql'")]

CANDIDATES = 'SELECT "turnkit_conversation"."updated_at"'
ACTIVE_CHECK = 'SELECT "turnkit_turn"."conversation_id" AS "conversation_id" FROM "turnkit_turn"'


def history(finished: int, active: int) -> None:
    """``finished`` turns two per conversation, and ``active`` inline turns never started (each
    in a conversation of its own, its input only), every conversation idle for 40 days."""
    create_terminal_turns(finished, per_conversation=2)
    pending = create_terminal_turns(active)
    Message.objects.filter(turn_id__in=pending, role="assistant").delete()
    Conversation.objects.filter(turns__in=pending).update(last_sequence=1)
    Turn.objects.filter(pk__in=pending).update(status="pending", state={}, output_text="",
                                               started_at=None, completed_at=None)
    Conversation.objects.update(updated_at=timezone.now() - timedelta(days=40))


def prune_queries(*, dry_run: bool, limit: int = 100) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        delete_prunable(timezone.now() - timedelta(days=30), limit, dry_run=dry_run)
    return [q["sql"] for q in captured.captured_queries
            if q["sql"].startswith(("SELECT", "DELETE", "UPDATE"))]


def plan(query: str, *, nested: bool = False) -> str:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE turnkit_turn")
        cursor.execute("ANALYZE turnkit_conversation")
        cursor.execute("SET LOCAL enable_seqscan = off")  # deterministic on a small table
        # An index scan, not a bitmap scan of the same index (which one the planner takes
        # for a short list depends on the statistics of the moment).
        cursor.execute("SET LOCAL enable_bitmapscan = off")
        if nested:  # probe each candidate's active turns (a hash would read all of them)
            cursor.execute("SET LOCAL enable_hashjoin = off")
            cursor.execute("SET LOCAL enable_mergejoin = off")
            cursor.execute("SET LOCAL enable_material = off")
        cursor.execute(f"EXPLAIN {query}")
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_candidates_and_their_active_turns_are_read_through_the_partial_index():
    history(400, 20)
    queries = prune_queries(dry_run=True, limit=10)  # fewer candidates than active turns
    candidates = next(q for q in queries if q.startswith(CANDIDATES))
    active = next(q for q in queries if q.startswith(ACTIVE_CHECK))
    explained = plan(candidates, nested=True)
    # Its own active turns and its child conversations', each looked up by conversation.
    assert explained.count("Scan using turnkit_turn_active_conv") == 2, explained
    assert explained.count("Index Cond: (conversation_id = ") == 2, explained
    explained = plan(active)
    assert "Scan using turnkit_turn_active_conv" in explained, explained
    # Django 6.1 compares the column as text: ``((conversation_id)::text = ANY ...``.
    assert re.search(r"Index Cond: \(\(?conversation_id\)?(::text)? = ANY ", explained), explained
    assert "Sort" not in explained, explained
    assert "ORDER BY" not in active


def test_a_pass_that_deletes_sorts_only_its_candidates():
    history(400, 20)
    queries = prune_queries(dry_run=False, limit=1000)
    assert not Conversation.objects.filter(turns__status="completed").exists()
    assert Turn.objects.filter(status="pending").count() == 20
    assert [q for q in queries if "ORDER BY" in q] == [
        q for q in queries if q.startswith(CANDIDATES)]
    assert not [q for q in queries if q.startswith("DELETE") and "ORDER BY" in q]
    assert not [q for q in queries
                if 'FROM "turnkit_message" INNER JOIN "turnkit_conversation"' in q]



def test_finding_the_turns_to_detach_reads_each_link_by_its_index():
    """The turns of other conversations hanging from a batch's trees are found by each link
    (root, parent turn, parent tool execution) on its own: one query OR-ing the three across
    joins made PostgreSQL hash-join whole tables (6 s a batch with a million turns)."""
    history(400, 0)
    queries = prune_queries(dry_run=False, limit=1000)
    detach = [q for q in queries if q.startswith('SELECT "turnkit_turn"."id"')
              and "root_turn_id" in q and "parent_turn_id" in q]
    assert detach, queries
    for query in detach:
        assert " OR " not in query, query[:400]
        explained = plan(query)
        assert "Seq Scan" not in explained and "Hash Join" not in explained, explained
