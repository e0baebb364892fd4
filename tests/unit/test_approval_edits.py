"""What a person's edit of a parked call's arguments stores and runs (issue 35 H9).

An edited string with a NUL or a lone surrogate was stored as U+FFFD, so the tool ran with
arguments nobody approved; it is InputError now, like every other application input. An edit
pydantic converts (``"7"`` or ``True`` for an int) was stored as given while the tool got the
conversion; the stored arguments are now the validated ones, as JSON: the record is what ran.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnkit_django import Agent, InputError, tool
from turnkit_django.models import ToolExecution
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

ran: list[tuple[Any, ...]] = []


@pytest.fixture(autouse=True)
def _empty() -> None:
    ran.clear()


@tool(approval=True)
def refund(order_id: str, amount_cents: int, note: str = "") -> dict:
    """Refund an order, once a person approves."""
    ran.append((order_id, amount_cents, note))
    return {"refunded": amount_cents}


def respond(request: Any) -> Any:
    if request.last_message_is_tool_result():
        return reply("done")
    return call("refund", order_id="42", amount_cents=500)


def parked(registered: Any) -> tuple[Any, ToolExecution]:
    agent = registered(Agent("edits", tools=[refund], client=FunctionClient(respond)))
    run = agent.run("refund 42")
    assert run.status == "paused", run.error
    (execution,) = run.pending_approvals()
    return run, execution


@pytest.mark.parametrize("text", ["a\x00b", "a\ud800b"], ids=["nul", "surrogate"])
@pytest.mark.parametrize("where", ["value", "key"])
def test_an_edit_no_database_stores_as_given_is_refused(registered, text, where):
    run, execution = parked(registered)
    edit: dict[str, Any] = {"order_id": "42", "amount_cents": 300}
    edit.update({"note": text} if where == "value" else {text: "x"})

    with pytest.raises(InputError, match="arguments") as raised:
        run.approve(execution.id, arguments=edit)

    assert text not in str(raised.value)
    row = ToolExecution.objects.get(pk=execution.id)
    assert row.arguments == {"order_id": "42", "amount_cents": 500}
    assert row.approval["state"] == "requested" and run.refresh().status == "paused"
    assert ran == []


@pytest.mark.parametrize(("given", "runs"), [("7", 7), (True, 1), (7.0, 7)])
def test_the_stored_arguments_are_those_the_tool_runs_with(registered, given, runs):
    run, execution = parked(registered)

    run.approve(execution.id, arguments={"order_id": "42", "amount_cents": given})

    assert run.status == "completed", run.error
    assert ran == [("42", runs, "")]
    row = ToolExecution.objects.get(pk=execution.id)
    assert row.arguments == {"order_id": "42", "amount_cents": runs, "note": ""}
    assert type(row.arguments["amount_cents"]) is int
    assert row.approval["proposed_arguments"] == {"order_id": "42", "amount_cents": 500}
    # Approving again with the same edit is the no-op it was.
    run.approve(execution.id, arguments={"order_id": "42", "amount_cents": given})
    assert ran == [("42", runs, "")]
