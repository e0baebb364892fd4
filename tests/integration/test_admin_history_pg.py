"""The admin's turn list reads the newest rows of its index on PostgreSQL (issue 41).

The same list checks as ``tests/unit/test_admin_history.py`` run here on PostgreSQL; then the
plan of the turn list's page query, with history behind it, walks ``turnkit_turn_listed``
(``created_at DESC, id DESC``) instead of sorting every turn, and its tree cost and "tree cost
unknown" read each page row's tree through the root_turn foreign key's index.
"""

from __future__ import annotations

import pytest
from django.db import connection

from tests.unit.test_admin_history import (
    history,
    list_queries,
    staff_client,
    test_a_list_issues_as_many_queries_with_history_as_without,
    test_a_list_neither_counts_nor_lists_distinct_values_of_the_whole_table,
    test_the_lists_have_no_date_drill_down_and_filter_by_agent_model_and_tool,
)

pytestmark = [pytest.mark.django_db, pytest.mark.corrupts_data,
              pytest.mark.skipif("connection.vendor != 'postgresql'")]

__all__ = [
    "staff_client",
    "test_a_list_issues_as_many_queries_with_history_as_without",
    "test_a_list_neither_counts_nor_lists_distinct_values_of_the_whole_table",
    "test_the_lists_have_no_date_drill_down_and_filter_by_agent_model_and_tool",
]


def plan(query: str, *, forced: bool = True) -> str:
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE turnkit_turn")
        if forced:  # deterministic on a small table
            cursor.execute("SET LOCAL enable_seqscan = off")
            cursor.execute("SET LOCAL enable_sort = off")
        cursor.execute(f"EXPLAIN {query}")
        return "\n".join(row[0] for row in cursor.fetchall())


def test_the_turn_list_reads_its_index_not_a_sort_of_every_turn(staff_client):
    history(2000)
    page = next(q for q in list_queries(staff_client, "turn")
                if q.startswith('SELECT "turnkit_turn"."id", "turnkit_turn"."conversation_id"')
                and "tree_cost_unknown" in q)
    assert 'ORDER BY "turnkit_turn"."created_at" DESC, "turnkit_turn"."id" DESC' in page
    explained = plan(page)
    assert "turnkit_turn_listed" in explained, explained
    assert "Sort" not in explained.split("SubPlan")[0], explained
    subplans = explained.split("SubPlan")[1:]
    assert len(subplans) == 2 and all("turnkit_turn_root_turn_id" in s for s in subplans), explained
    assert "Hash" not in explained, explained
    # Left to itself the planner may hash an EXISTS over every turn (a seq scan of the whole
    # table per page; 328 ms with a million turns): the tree's columns are scalar subqueries,
    # which it runs for the page's rows only.
    assert " EXISTS(" not in page.upper().replace("EXISTS (", "EXISTS("), page
    chosen = plan(page, forced=False)
    assert "hashed SubPlan" not in chosen, chosen
