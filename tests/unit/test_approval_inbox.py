"""The approvals inbox is complete for what it is asked, however many calls wait elsewhere.

``pending_approvals(principal=...)`` lists the calls the principal may approve, and
``run.pending_approvals()`` the calls of the run's tree. Both are bounded by
``MAINTENANCE_BATCH_SIZE``; neither may lose a call because other tenants' or other runs'
requests are older and fill the bound first.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import override_turnkit
from turnkit_django import Agent, ToolContext, pending_approvals, services, tool
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]


@tool(approval=True)
def refund(ctx: ToolContext, amount_cents: int) -> dict:
    """Refund an amount, once a person approves."""
    return {"refunded": amount_cents}


def respond(request: Any) -> Any:
    if request.last_message_is_tool_result():
        return reply("done")
    return call("refund", amount_cents=5)


def parked(agent: Agent, tenant: str) -> Any:
    run = agent.submit("refund", principal={"tenant": tenant})
    assert services.run_turn(run.id)
    return run.refresh()


def test_older_requests_of_other_runs_and_tenants_do_not_hide_a_call(registered):
    agent = registered(Agent("refunds", tools=[refund], client=FunctionClient(respond)))
    others = [parked(agent, "acme") for _ in range(3)]
    mine = parked(agent, "globex")
    assert {r.status for r in [*others, mine]} == {"paused"}

    with override_turnkit(MAINTENANCE_BATCH_SIZE=2,
                          AUTHORIZATION_POLICY="tests.orchestration.tenant_policy"):
        (own,) = mine.pending_approvals(principal={"tenant": "globex"})
        assert own.turn_id == mine.id
        (inbox,) = pending_approvals(principal={"tenant": "globex"})
        assert inbox.pk == own.pk
        assert len(pending_approvals(principal={"tenant": "acme"})) == 2  # the bound holds
        assert [e.turn_id for e in others[2].pending_approvals(
            principal={"tenant": "acme"})] == [others[2].id]
