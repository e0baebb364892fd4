"""Which parked call an approval decides, and what is checked before a person is asked.

OpenAI-compatible local servers send ``call_0`` in every response, so the root turn and a child
it launched can both park a call ``call_0`` for approval. A call id that names more than one
approval request in the tree is ambiguous: ``run.approve``/``run.deny`` raise ApprovalError
naming the candidates (turn and execution ids, never arguments) and decide nothing; the
execution id (the ``approval.requested`` event's ``execution_id``, or ``.id`` of an entry of
``pending_approvals()``) picks one, and a turn handle decides the calls of its own turn only.

A call the authorization policy or the duplicate-id rule would refuse is refused at once,
without an approval request; an approved call is authorized again before it runs (the policy
may have changed while it waited). The ledger counts the refunds.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import override_turnkit
from turnkit_django import Agent, ApprovalError, AuthorizationError, ToolContext, services, tool
from turnkit_django.api.handles import load_turn
from turnkit_django.models import Event, ToolExecution, Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply
from turnkit_django.tools import launch_agent

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]

ledger: list[int] = []


@pytest.fixture(autouse=True)
def _empty_ledger() -> None:
    ledger.clear()


@tool(approval=True)
def refund(ctx: ToolContext, amount_cents: int) -> dict:
    """Refund an amount, once a person approves."""
    ledger.append(amount_cents)
    return {"refunded": amount_cents}


def child_respond(request: Any) -> Any:
    if request.last_message_is_tool_result():
        return reply("child done")
    return call("refund", id="call_0", amount_cents=99999)


def parent_respond(request: Any) -> Any:
    results = [p for m in request.messages if m.role == "tool" for p in m.tool_results]
    if not results:
        return call("launch_agent", id="call_launch", agent="kid", task="go")
    if len(results) == 1:
        return call("refund", id="call_0", amount_cents=5)
    return reply("parent done")


def both_parked(registered: Any) -> tuple[Any, Turn]:
    """A background run whose root and child each park a refund ``call_0``."""
    kid = Agent("kid", tools=[refund], client=FunctionClient(child_respond))
    parent = registered(Agent("boss", tools=[launch_agent, refund], sub_agents=[kid],
                              client=FunctionClient(parent_respond)))
    run = parent.submit("start", principal={"user": 1})
    assert services.run_turn(run.id)
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)
    assert {t.status for t in Turn.objects.tree(run.id)} == {"paused"}
    return run, child


def approval_state(turn_id: str) -> str | None:
    execution = ToolExecution.objects.get(turn_id=turn_id, tool_name="refund")
    return (execution.approval or {}).get("state")


def requested_execution(turn_id: str) -> str:
    (event,) = Event.objects.filter(turn_id=turn_id, type="approval.requested")
    return event.payload["execution_id"]


@pytest.mark.parametrize("decision", ["approve", "deny"])
def test_a_call_id_two_turns_of_the_tree_parked_is_refused_and_names_the_candidates(
        registered, decision):
    run, child = both_parked(registered)

    with pytest.raises(ApprovalError) as caught:
        getattr(run, decision)("call_0", principal={"user": 1})

    message = str(caught.value)
    for turn_id in (run.id, child.pk):
        assert turn_id in message and requested_execution(turn_id) in message
    assert "99999" not in message and "amount_cents" not in message  # no arguments
    assert "execution id" in message
    assert approval_state(run.id) == approval_state(child.pk) == "requested"
    assert ledger == []


def test_an_ambiguous_call_id_names_only_the_candidates_the_caller_may_decide(registered):
    run, child = both_parked(registered)

    def root_only(action: str, *, principal: Any, turn_id: str = "", **_: Any) -> bool:
        return action != "approve" or (principal == {"user": 1} and turn_id == run.id)

    with override_turnkit(AUTHORIZATION_POLICY=root_only):
        with pytest.raises(ApprovalError) as caught:
            run.approve("call_0", principal={"user": 1})
        assert requested_execution(run.id) in str(caught.value)
        assert child.pk not in str(caught.value)
        assert requested_execution(child.pk) not in str(caught.value)

        with pytest.raises(AuthorizationError) as refused:  # may decide neither: no ids
            run.approve("call_0", principal={"user": 2})
        assert child.pk not in str(refused.value) and "call_0" not in str(refused.value)
    assert approval_state(run.id) == approval_state(child.pk) == "requested"


def test_the_execution_id_of_the_requested_event_picks_the_call(registered):
    run, child = both_parked(registered)

    run.approve(requested_execution(run.id), principal={"user": 1})
    assert approval_state(run.id) == "approved"
    assert approval_state(child.pk) == "requested"
    assert services.run_turn(run.id)  # the root resumes, runs its refund, waits on nothing
    assert ledger == [5]

    # A retry by call id stays ambiguous: it must not land on the child's request.
    with pytest.raises(ApprovalError):
        run.approve("call_0", principal={"user": 1})
    assert approval_state(child.pk) == "requested"

    (entry,) = run.pending_approvals()
    assert entry.turn_id == child.pk
    run.deny(entry.id, reason="too much", principal={"user": 1})
    assert approval_state(child.pk) == "denied" and ledger == [5]


def test_a_turn_handle_decides_the_calls_of_its_own_turn_only(registered):
    run, child = both_parked(registered)

    load_turn(child.pk).deny("call_0", reason="too much")
    assert approval_state(child.pk) == "denied"
    assert approval_state(run.id) == "requested"
    assert [e.turn_id for e in load_turn(child.pk).pending_approvals()] == []
    assert [e.turn_id for e in run.turn.pending_approvals()] == [run.id]

    run.turn.approve("call_0")
    assert approval_state(run.id) == "approved"

    with pytest.raises(ApprovalError, match="no tool call"):  # not a call of this turn
        load_turn(child.pk).approve(requested_execution(run.id))


def test_a_call_id_only_one_turn_parked_is_decided_from_the_run(registered):
    kid = Agent("kid", tools=[refund], client=FunctionClient(child_respond))
    parent = registered(Agent("boss", tools=[launch_agent], sub_agents=[kid],
                              client=FunctionClient(lambda request: reply("parent done")
                                                    if request.last_message_is_tool_result()
                                                    else call("launch_agent", id="call_0",
                                                              agent="kid", task="go"))))
    run = parent.submit("start")
    assert services.run_turn(run.id)
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)

    # The root's call_0 is the launch (no approval); the child's refund is the only request.
    run.approve("call_0")
    assert approval_state(child.pk) == "approved"
    assert services.run_turn(child.pk) and ledger == [99999]


def refuse_refunds_for(user: int) -> Any:
    def policy(action: str, *, principal: Any, **resources: Any) -> bool:
        return not (action == "tool" and resources.get("tool") == "refund"
                    and principal == {"user": user})
    return policy


def test_a_call_the_authorization_policy_refuses_is_not_put_to_a_person(registered):
    agent = registered(Agent("refunder", tools=[refund], client=ScriptedClient(
        [call("refund", amount_cents=5), reply("could not")])))
    with override_turnkit(AUTHORIZATION_POLICY=refuse_refunds_for(2)):
        run = agent.run("refund", principal={"user": 2})

    assert run.status == "completed", run.error
    (execution,) = run.tool_executions()
    assert execution.approval is None and execution.status == "failed"
    assert not Event.objects.filter(type="approval.requested").exists()
    assert ledger == []


def test_a_duplicate_call_id_is_refused_without_asking_a_person(registered):
    agent = registered(Agent("dup_refunder", tools=[refund], client=ScriptedClient(
        [[call("refund", id="dup", amount_cents=1), call("refund", id="dup", amount_cents=2)],
         reply("done")])))
    run = agent.run("refund twice")

    assert run.status == "paused"
    (requested,) = Event.objects.filter(type="approval.requested")
    run.approve(requested.payload["execution_id"])
    assert run.refresh().status == "completed", run.error
    assert Event.objects.filter(type="approval.requested").count() == 1
    assert ledger == [1]


def test_an_approved_call_is_authorized_again_before_it_runs(registered):
    agent = registered(Agent("late_refunder", tools=[refund], client=ScriptedClient(
        [call("refund", amount_cents=5), reply("could not")])))
    run = agent.submit("refund", principal={"user": 2})
    assert services.run_turn(run.id) and run.refresh().status == "paused"
    run.approve(run.pending_approvals()[0].id)

    with override_turnkit(AUTHORIZATION_POLICY=refuse_refunds_for(2)):  # revoked meanwhile
        assert services.run_turn(run.id)

    assert run.refresh().status == "completed", run.error
    (execution,) = run.tool_executions()
    assert execution.status == "failed" and ledger == []
