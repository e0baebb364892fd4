"""Approving, denying or resuming an inline run continues it in the caller's process, so inside
`transaction.atomic()` (an approval view under ATOMIC_REQUESTS) it is refused: with advice that
fits a run already waiting for a person, not "use submit()"."""

from __future__ import annotations

import pytest
from django.db import transaction

from turnkit_django import Agent, AtomicBlockError, ToolContext, tool
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = pytest.mark.django_db


@tool(approval=True)
def guarded(ctx: ToolContext, amount: int) -> dict:
    """Needs a person's approval."""
    return {"paid": amount}


@pytest.fixture
def parked(registered, settings):
    settings.TURNKIT = {**settings.TURNKIT, "CLIENT": ScriptedClient(
        [call("guarded", amount=5), reply("paid")])}
    run = registered(Agent("careful_newuser", tools=[guarded])).run("pay 5")
    assert run.status == "paused"
    return run, run.pending_approvals()[0]


def test_deciding_an_inline_run_in_an_atomic_block_says_what_to_do(parked):
    """An approval view under ATOMIC_REQUESTS: the refusal must not tell the user to submit()
    a run that is already waiting for them."""
    run, execution = parked
    for decide in (lambda: run.approve(execution.id), lambda: run.deny(execution.id)):
        with pytest.raises(AtomicBlockError) as refused, transaction.atomic():
            decide()
        text = str(refused.value)
        assert "@transaction.non_atomic_requests" in text
        assert "or use submit()" not in text and "started with submit()" in text
    assert run.refresh().status == "paused"


def test_approve_returns_the_execution_as_the_inline_run_left_it(parked):
    run, execution = parked
    decided = run.approve(execution.id)
    assert run.refresh().status == "completed"
    assert decided.status == "completed" and decided.result == {"paid": 5}
