"""Background sub-agents (issue 4; architecture section 7): fan out, wait, join in call order.

Background turns run in this thread through ``services.run_turn`` (what the Celery task does, a
maintenance pass included), so the test chooses the order in which the children finish.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.dispatch import background, recorded
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import crash_at, policy, policy_calls, recover, tool_results
from turnkit_django import Agent, LostClaim, ModelError, services, store, tool
from turnkit_django.api.handles import Run
from turnkit_django.base import failpoints
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.events import turn_started
from turnkit_django.models import ToolExecution, Turn, Wait
from turnkit_django.testing import Entry, FunctionClient, call, reply

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

NAMES = ("alpha", "beta", "gamma")


def specialist(name: str, respond: Callable[[ModelRequest], Entry] | None = None) -> Agent:
    """A sub-agent that answers its task (or follows ``respond``)."""
    def answer(request: ModelRequest) -> Entry:
        return reply(f"{name} did {request.messages[0].text}")

    return Agent(name, description=f"The {name} specialist.",
                 client=FunctionClient(respond or answer))


def orchestrator(registered: Any, first: Entry, *, subs: tuple[Agent, ...] | None = None,
                 tools: tuple[Any, ...] = (), **options: Any) -> Agent:
    """An agent that answers ``first`` to its task, then "joined" once it has tool results."""
    def respond(request: ModelRequest) -> Entry:
        if request.messages[-1].role == "tool":
            return reply("joined")
        return first

    subs = subs if subs is not None else tuple(specialist(n) for n in NAMES)
    return registered(Agent("orchestrator", sub_agents=list(subs), tools=list(tools),
                            client=FunctionClient(respond), **options))


def fan_out(*names: str) -> list[Any]:
    return [call(name, id=f"call_{name}", task=f"task {name}") for name in names]


def children(run: Run) -> dict[str, Turn]:
    return {row.agent_name: row for row in
            Turn.objects.filter(parent_turn_id=run.id).order_by("created_at")}


@pytest.fixture
def started_events() -> Iterator[list[Any]]:
    seen: list[Any] = []

    def receive(sender: Any, event: Any, **kwargs: Any) -> None:
        seen.append(event.turn_id)

    turn_started.connect(receive)
    yield seen
    turn_started.disconnect(receive)


# --------------------------------------------------------------------------- fan out and join


def test_three_children_finish_out_of_order_and_the_parent_joins_them_in_call_order(
        registered, django_capture_on_commit_callbacks, started_events):
    agent = orchestrator(registered, fan_out(*NAMES))
    run = agent.submit("research", principal={"tenant": "t1"})

    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(run.id)

    parent = Turn.objects.get(pk=run.id)
    kids = children(run)
    # The parent waits without holding a claim: its fence moved on and nobody owns it.
    assert (parent.status, parent.claimed_by, parent.fence) == ("waiting", "", 2)
    assert parent.state["phase"] == "tools"
    with pytest.raises(LostClaim), store.Fenced(store.Claim(
            run.id, run.id, run.conversation_id, 1, "the first worker")).atomic():
        pytest.fail("the suspended worker could still write")
    # One submitted child per call, in its own conversation, acting for the parent's principal.
    assert list(kids) == list(NAMES)
    for row in kids.values():
        assert row.status == "pending" and row.submitted_at is not None
        assert (row.depth, row.root_turn_id, row.principal) == (1, run.id, {"tenant": "t1"})
        assert row.conversation_id != run.conversation_id
        assert row.parent_tool_execution.tool_call_id == f"call_{row.agent_name}"
    assert set(recorded()) >= {row.pk for row in kids.values()}
    assert set(Wait.objects.filter(waiter_id=run.id).values_list("target_id", flat=True)) == {
        row.pk for row in kids.values()}
    # The calls stay open: pending executions, no results yet.
    assert set(ToolExecution.objects.filter(turn_id=run.id).values_list("status", flat=True)) \
        == {"pending"}
    assert tool_results(run.id) == []

    # The children finish in another order than called; the parent waits for the last one.
    for name in ("gamma", "alpha"):
        assert services.run_turn(kids[name].pk)
        assert Turn.objects.get(pk=run.id).status == "waiting"
    assert services.run_turn(kids["beta"].pk)
    assert Turn.objects.get(pk=run.id).status == "pending"  # released by maintenance

    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(run.id)

    parent.refresh_from_db()
    assert (parent.status, parent.output_text, parent.fence) == ("completed", "joined", 4)
    joined = tool_results(run.id)
    assert [call_id for call_id, _, _ in joined] == ["call_alpha", "call_beta", "call_gamma"]
    assert not any(is_error for _, is_error, _ in joined)
    assert [content["output_text"] for _, _, content in joined] == [
        f"{name} did task {name}" for name in NAMES]
    assert [content["turn_id"] for _, _, content in joined] == [kids[n].pk for n in NAMES]
    # Resumed exactly once: started twice, two model calls.
    assert started_events.count(run.id) == 2
    assert len(agent.client.requests) == 2


def test_a_failed_or_cancelled_child_is_a_structured_result_not_a_parent_failure(registered):
    subs = (specialist("alpha"),
            specialist("beta", lambda request: ModelError("the provider is down")),
            specialist("gamma"))
    run = orchestrator(registered, fan_out(*NAMES), subs=subs).submit("research")
    assert services.run_turn(run.id)
    kids = children(run)
    assert services.run_turn(kids["beta"].pk)
    services.cancel(kids["gamma"].pk)
    assert services.run_turn(kids["alpha"].pk)
    assert services.run_turn(run.id)

    assert run.refresh().status == "completed"
    (alpha, beta, gamma) = tool_results(run.id)
    assert alpha[1] is False and alpha[2]["status"] == "completed"
    assert beta[1] is True and beta[2]["status"] == "failed"
    assert beta[2]["error"]["message"] == "the provider is down"
    assert gamma[1] is True and gamma[2]["status"] == "cancelled"
    statuses = dict(ToolExecution.objects.filter(turn_id=run.id)
                    .values_list("tool_call_id", "status"))
    assert statuses == {"call_alpha": "completed", "call_beta": "failed", "call_gamma": "failed"}


@pytest.mark.parametrize("nth", [1, 2, 3])
def test_a_crash_between_launching_and_suspending_never_creates_a_second_child(registered, nth):
    run = orchestrator(registered, fan_out(*NAMES)).submit("research")
    crash_at("after_child_launch", nth)
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(run.id, kind="test")
    assert Turn.objects.get(pk=run.id).status == "running"
    assert len(children(run)) == nth

    recover(run.id)
    assert services.run_turn(run.id)

    assert Turn.objects.get(pk=run.id).status == "waiting"
    kids = children(run)
    assert list(kids) == list(NAMES)
    for execution in ToolExecution.objects.filter(turn_id=run.id):
        assert execution.child_turns.count() == 1
    assert Wait.objects.filter(waiter_id=run.id).count() == 3
    for name in reversed(NAMES):
        assert services.run_turn(kids[name].pk)
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed"
    assert [call_id for call_id, _, _ in tool_results(run.id)] == [f"call_{n}" for n in NAMES]


def test_a_crash_after_the_join_resumes_without_repeating_it(registered):
    run = orchestrator(registered, fan_out(*NAMES)).submit("research")
    assert services.run_turn(run.id)
    for row in children(run).values():
        assert services.run_turn(row.pk)
    # After the join commits, before the final answer commits (with the publication: the
    # model step has nothing to review, so the response and the terminal write are one commit).
    crash_at("before_publish", 1)
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(run.id, kind="test")
    assert len(tool_results(run.id)) == 3
    recover(run.id)
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed"
    assert [call_id for call_id, _, _ in tool_results(run.id)] == [f"call_{n}" for n in NAMES]


# --------------------------------------------------------------------------- the group


@tool
def lookup(ctx) -> str:
    """Look something up."""
    return "looked up"


@tool(terminal=True)
def finish(ctx) -> str:
    """End the turn."""
    return "finished"


def test_an_ordinary_tool_after_the_group_runs_only_after_the_join(registered):
    first = [*fan_out("alpha", "beta"), call("lookup", id="call_lookup")]
    run = orchestrator(registered, first, tools=(lookup,)).submit("research")
    assert services.run_turn(run.id)
    assert not ToolExecution.objects.filter(turn_id=run.id, tool_name="lookup").exists()
    for row in children(run).values():
        assert services.run_turn(row.pk)
    assert services.run_turn(run.id)
    assert [call_id for call_id, _, _ in tool_results(run.id)] == ["call_alpha", "call_beta",
                                                               "call_lookup"]


def test_two_groups_in_one_response_wait_twice(registered):
    first = [call("alpha", id="call_a1", task="one"), call("lookup", id="call_lookup"),
             call("alpha", id="call_a2", task="two")]
    run = orchestrator(registered, first, tools=(lookup,)).submit("research")
    assert services.run_turn(run.id)
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)
    assert services.run_turn(run.id)
    assert Turn.objects.get(pk=run.id).status == "waiting"
    (second,) = Turn.objects.filter(parent_turn_id=run.id).exclude(pk=child.pk)
    assert services.run_turn(second.pk)
    assert services.run_turn(run.id)
    assert [call_id for call_id, _, _ in tool_results(run.id)] == ["call_a1", "call_lookup",
                                                               "call_a2"]


def test_a_terminal_tool_earlier_in_the_batch_launches_nothing(registered):
    first = [call("finish", id="call_finish"), *fan_out("alpha")]
    run = orchestrator(registered, first, tools=(finish,)).submit("research")
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed" and run.output_text == "finished"
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()
    assert tool_results(run.id)[1][2]["error"] == "not_executed"


def test_a_refused_call_launches_nothing_and_is_answered_in_call_order(registered):
    first = [*fan_out("alpha"), call("beta", id="call_beta"), *fan_out("gamma")]
    run = orchestrator(registered, first).submit("research")
    assert services.run_turn(run.id)
    assert list(children(run)) == ["alpha", "gamma"]
    assert tool_results(run.id) == []
    for row in children(run).values():
        assert services.run_turn(row.pk)
    assert services.run_turn(run.id)
    (alpha, beta, gamma) = tool_results(run.id)
    assert [alpha[0], beta[0], gamma[0]] == ["call_alpha", "call_beta", "call_gamma"]
    assert beta[1] is True and beta[2]["error"] == "invalid_arguments"
    assert alpha[2]["status"] == gamma[2]["status"] == "completed"


def test_launch_and_wait_are_authorized_for_the_parents_principal(registered, policy_calls):
    run = orchestrator(registered, fan_out("alpha", "beta")).submit("go", principal={"user": 3})
    with policy("tests.orchestration.allow"):
        assert services.run_turn(run.id)
    asked = [(action, principal, resources.get("agent") or resources.get("target_ids"))
             for action, principal, resources in policy_calls if action != "tool"]
    kids = children(run)
    assert asked == [("launch_agent", {"user": 3}, "alpha"),
                     ("wait", {"user": 3}, [kids["alpha"].pk]),
                     ("launch_agent", {"user": 3}, "beta"),
                     ("wait", {"user": 3}, [kids["beta"].pk])]


@pytest.mark.parametrize("action", ["tool", "launch_agent", "wait"])
def test_a_denied_delegation_rolls_back_its_child_and_is_a_failed_result(registered,
                                                                         policy_calls, action):
    from tests import orchestration

    orchestration.denied_actions.add(action)
    run = orchestrator(registered, fan_out("alpha", "beta")).submit("go")
    with policy("tests.orchestration.selective"):
        assert services.run_turn(run.id)
    # Nothing launched, so nothing to wait for: joined at once, and the model went on.
    assert run.refresh().status == "completed"
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()
    assert not Wait.objects.exists()
    assert [(is_error, content["error"]) for _, is_error, content in tool_results(run.id)] == [
        (True, "not_authorized")] * 2


# --------------------------------------------------------------------------- limits


def test_each_delegation_takes_a_tool_slot_and_an_overrun_fails_the_parent(registered):
    run = orchestrator(registered, fan_out(*NAMES), max_tool_executions=2).submit("research")
    assert services.run_turn(run.id)
    run.refresh()
    assert run.status == "failed"
    assert run.error["reason"] == "maximum tool executions reached"
    assert Turn.objects.get(pk=run.id).tree_tool_executions == 2
    assert list(children(run)) == ["alpha", "beta"]
    # The refused call is answered at once; the launched ones, never joined, by the repair.
    answers = {call_id: content["error"] for call_id, _, content in tool_results(run.id)}
    assert answers == {"call_gamma": "budget_exceeded", "call_alpha": "outcome_unknown",
                       "call_beta": "outcome_unknown"}
    assert ToolExecution.objects.get(tool_call_id="call_gamma").budget_denied


def test_a_delegation_past_the_depth_limit_fails_the_parent(registered):
    run = orchestrator(registered, fan_out("alpha"), max_depth=0).submit("research")
    assert services.run_turn(run.id)
    run.refresh()
    assert run.status == "failed" and run.error["reason"] == "maximum sub-agent depth reached"
    assert not Turn.objects.filter(parent_turn_id=run.id).exists()


def test_a_waiting_parent_past_its_deadline_is_released_and_fails_with_the_timeout(registered):
    run = orchestrator(registered, fan_out("alpha")).submit("research")
    assert services.run_turn(run.id)
    Turn.objects.filter(pk=run.id).update(deadline_at=timezone.now() - timedelta(seconds=1))
    services.drain()
    assert Turn.objects.get(pk=run.id).status == "pending"
    assert services.run_turn(run.id)
    run.refresh()
    assert run.status == "failed" and run.error["reason"] == "turn timed out"
    (alpha,) = tool_results(run.id)
    assert alpha[2]["error"] == "outcome_unknown"


def test_cascade_cancel_of_a_waiting_parent_cancels_its_children(registered):
    run = orchestrator(registered, fan_out(*NAMES)).submit("research")
    assert services.run_turn(run.id)
    report = services.cancel(run.id, cascade=True)
    assert len(report.cancelled) == 4
    assert {row.status for row in children(run).values()} == {"cancelled"}
    assert set(ToolExecution.objects.filter(turn_id=run.id).values_list("status", flat=True)) \
        == {"interrupted"}
    assert len(tool_results(run.id)) == 3


def test_an_inline_parent_still_runs_its_children_synchronously(registered):
    run = orchestrator(registered, fan_out(*NAMES)).run("research")
    assert run.status == "completed"
    assert all(row.status == "completed" and row.submitted_at is None
               for row in children(run).values())
    assert not Wait.objects.exists()
    assert [call_id for call_id, _, _ in tool_results(run.id)] == [f"call_{n}" for n in NAMES]


def test_a_background_child_without_a_client_uses_its_nearest_ancestors(registered):
    def respond(request: ModelRequest) -> Entry:
        if request.metadata["agent"] == "plain":
            return reply("answered by the parent's client")
        if request.messages[-1].role == "tool":
            return reply("joined")
        return fan_out("plain")

    agent = registered(Agent("orchestrator", sub_agents=[Agent("plain", description="Plain.")],
                             client=FunctionClient(respond)))
    run = agent.submit("research")
    assert services.run_turn(run.id)
    (child,) = children(run).values()
    assert services.run_turn(child.pk)
    assert Turn.objects.get(pk=child.pk).output_text == "answered by the parent's client"
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed"
