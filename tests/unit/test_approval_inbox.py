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
from tests.orchestration import policy_calls
from turnkit_django import Agent, InputError, ToolContext, pending_approvals, services, tool
from turnkit_django.testing import FunctionClient, call, reply

__all__ = ["policy_calls"]

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


def test_an_inbox_asks_the_policy_about_a_bounded_number_of_requests(registered, policy_calls):
    """Ten requests read per call listed (``scan=`` overrides it), and no more once ``limit``
    calls are found: one inbox view costs a bounded number of policy calls however many
    requests other tenants have waiting (issue 35)."""
    agent = registered(Agent("refunds", tools=[refund], client=FunctionClient(respond)))
    for _ in range(30):
        parked(agent, "acme")
    mine = parked(agent, "globex")

    def approve_calls() -> int:
        count = sum(1 for action, _, _ in policy_calls if action == "approve")
        policy_calls.clear()
        return count

    with override_turnkit(AUTHORIZATION_POLICY="tests.orchestration.tenant_recorded"):
        policy_calls.clear()
        assert pending_approvals(principal={"tenant": "globex"}, limit=2) == []
        assert approve_calls() == 20  # 10 x limit: the 30 older acme requests fill the scan
        (found,) = pending_approvals(principal={"tenant": "globex"}, limit=2, scan=31)
        assert found.turn_id == mine.id and approve_calls() == 31
        # Narrowed to the run, the query finds it whatever waits elsewhere.
        (own,) = pending_approvals(principal={"tenant": "globex"}, limit=2, root_id=mine.id)
        assert own.pk == found.pk and approve_calls() == 1
        # Full at the first allowed call: the rest of the page is not asked about.
        assert len(pending_approvals(principal={"tenant": "acme"}, limit=1)) == 1
        assert approve_calls() == 1
        with override_turnkit(MAINTENANCE_BATCH_SIZE=4):  # no limit: 10 x the batch
            assert len(pending_approvals(principal={"tenant": "acme"})) == 4
            assert len(pending_approvals(principal={"tenant": "globex"})) == 1  # scan 40
            assert approve_calls() == 4 + 31


@pytest.mark.parametrize("scan", [0, -1, True, 2.5, "10"])
def test_a_bad_scan_is_refused(scan):
    with pytest.raises(InputError, match="scan="):
        pending_approvals(scan=scan)
