"""The admin lists stay usable however much history there is (issue 41, history costs).

The turn, conversation and tool-execution lists read a page and what the page needs: no
``COUNT(*)`` of the whole table (the count is bounded), no ``SELECT DISTINCT`` over the table
for a filter's choices, no date drill-down that sorts every row, and as many queries with a
thousand finished turns as with a few. The plan of the turn list on PostgreSQL is in
``tests/integration/test_admin_history_pg.py``.
"""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from tests.factories import create_terminal_turns
from turnkit_django.models import ToolExecution, Turn

# The tool executions answer no call message: rows for the lists, not a transcript.
pytestmark = [pytest.mark.django_db, pytest.mark.corrupts_data]

LISTS = ("turn", "conversation", "toolexecution")


@pytest.fixture
def staff_client(client):
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    return client


def history(count: int) -> None:
    ids = create_terminal_turns(count, per_conversation=2)
    ToolExecution.objects.bulk_create(
        ToolExecution(turn_id=turn_id, tool_call_id="call_1", tool_name=f"tool_{i % 3}",
                      status="completed") for i, turn_id in enumerate(ids))


def list_queries(client, name: str, **query: str) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        response = client.get(reverse(f"admin:turnkit_{name}_changelist"), query)
    assert response.status_code == 200
    return [q["sql"] for q in captured.captured_queries]


def unbounded(queries: list[str]) -> list[str]:
    """Counts and DISTINCTs that read a whole table: neither a WHERE nor a LIMIT bounds them."""
    return [q for q in queries if re.search(r"COUNT\(|DISTINCT", q, re.IGNORECASE)
            and not re.search(r"\bWHERE\b|\bLIMIT\b", q, re.IGNORECASE)]


@pytest.mark.parametrize("name", LISTS)
def test_a_list_neither_counts_nor_lists_distinct_values_of_the_whole_table(staff_client, name):
    history(30)
    queries = list_queries(staff_client, name)
    assert unbounded(queries) == []
    assert not [q for q in queries if "DISTINCT" in q.upper() and "LIMIT" not in q.upper()]


@pytest.mark.parametrize("name", LISTS)
def test_a_list_issues_as_many_queries_with_history_as_without(staff_client, name):
    history(3)
    few = list_queries(staff_client, name)
    history(300)
    many = list_queries(staff_client, name)
    assert len(many) == len(few) <= 12, many


def test_the_lists_have_no_date_drill_down_and_filter_by_agent_model_and_tool(staff_client):
    history(6)
    turn = Turn.objects.order_by("created_at").first()
    assert turn is not None
    for name, query, count in (("turn", {"agent_name": turn.agent_name, "model": turn.model}, 6),
                               ("conversation", {"agent_name": turn.agent_name}, 3),
                               ("toolexecution", {"tool_name": "tool_1"}, 2)):
        response = staff_client.get(reverse(f"admin:turnkit_{name}_changelist"), query)
        changelist = response.context["cl"]
        assert changelist.date_hierarchy is None and changelist.result_count == count
        assert changelist.full_result_count is None  # never counted beside the page
