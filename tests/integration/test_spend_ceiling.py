"""A cost too large to record, on PostgreSQL: the ceiling holds on every write path.

A provider's absurd reported cost used to reach the cost columns (18 digits, 8 places): on
PostgreSQL the step failed with ``DataError: numeric field overflow``, on SQLite it was stored and
every later read of the row raised ``decimal.InvalidOperation``. Inline runs write through the
ORM, background turns through the prepared step statements; both must stop at ``MAX_COST``.
"""

from __future__ import annotations

import pytest

from tests.dispatch import background
from tests.helpers import registered, verify_after_test
from turnkit_django import Agent, services, tool
from turnkit_django.clients import ModelResponse, Usage
from turnkit_django.messages import TextPart, ToolCallPart
from turnkit_django.models import Turn
from turnkit_django.store.limits import MAX_COST, SPEND_UNRECORDABLE
from turnkit_django.testing import FunctionClient

__all__ = ["background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def absurd(request: object) -> ModelResponse:
    """Ask for ping, reporting a cost no cost column can hold."""
    return ModelResponse((TextPart(""), ToolCallPart("call_ping", "ping")), Usage(1, 1),
                         reported_cost="1e30")


@pytest.mark.parametrize("submitted", [False, True], ids=["inline", "background"])
def test_a_cost_too_large_to_record_fails_the_run_and_keeps_the_row_readable(registered,
                                                                             submitted):
    agent = registered(Agent("pg_spender", tools=[ping], client=FunctionClient(absurd)))
    if submitted:
        run = agent.submit("go")
        assert services.run_turn(run.id, kind="test")
        run.refresh()
    else:
        run = agent.run("go")

    assert run.status == "failed"
    assert run.error["type"] == "BudgetExceeded" and run.error["message"] == SPEND_UNRECORDABLE
    assert run.cost is None
    root = Turn.objects.get(pk=run.id)
    assert root.tree_spend == MAX_COST and root.cost == 0 and root.cost_unknown
    assert not run.tool_executions().filter(status="completed").exists()
