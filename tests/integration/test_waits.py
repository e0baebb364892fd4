"""Application waits (issue 4; architecture sections 5 and 7): rules, release, joined results.

Background turns run in this thread through ``services.run_turn`` (what the Celery task does) and
``services.drain()`` is the maintenance pass that releases waiters.
"""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import DENIALS, policy, policy_calls, snapshot
from turnkit_django import (
    Agent,
    AuthorizationError,
    InvalidTransition,
    WaitError,
    load_turn,
    services,
)
from turnkit_django.api.handles import Run
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import Message, Turn, Wait
from turnkit_django.testing import FunctionClient, reply

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


@pytest.fixture
def agents(registered) -> dict[str, Any]:
    """Registered agents: ``worker`` answers its task; ``joiner`` records what it was given."""
    requests: list[ModelRequest] = []

    def join(request: ModelRequest) -> Any:
        requests.append(request)
        return reply("joined")

    def work(request: ModelRequest) -> Any:
        return reply(f"result of {request.messages[0].text}")

    return {
        "worker": registered(Agent("worker", client=FunctionClient(work))),
        "joiner": registered(Agent("joiner", client=FunctionClient(join))),
        "requests": requests,
    }


def submitted(agent: Agent, task: str) -> Run:
    return agent.prepare(task).submit()


def joined_results(request: ModelRequest) -> list[dict[str, Any]]:
    """The envelopes of the joined-results message the model was given."""
    (message,) = [m for m in request.messages if m.role == "user" and "waited for" in m.text]
    return json.loads(message.text.split("\n", 1)[1])["results"]


# --------------------------------------------------------------------------- rules


def test_a_turn_cannot_wait_for_itself(agents):
    run = agents["joiner"].prepare("join")
    with pytest.raises(WaitError, match="itself"):
        run.wait_for(run)


def test_targets_must_be_submitted_or_finished(agents):
    waiter = agents["joiner"].prepare("join")
    with pytest.raises(WaitError, match="neither submitted nor finished"):
        waiter.wait_for(agents["worker"].prepare("never submitted"))
    finished_inline = agents["worker"].run("done already")
    waiter.wait_for(finished_inline, submitted(agents["worker"], "later"))
    assert Wait.objects.filter(waiter_id=waiter.id).count() == 2
    with pytest.raises(WaitError, match="no turn 'turn_missing'"):
        waiter.wait_for("turn_missing")


@pytest.mark.parametrize("bad", ["turn_\x00", "turn_\ud800"], ids=["nul", "surrogate"])
def test_an_id_no_database_can_store_names_no_turn(agents, bad):
    # PostgreSQL refuses such a query outright: a DataError / UnicodeEncodeError out of
    # wait_for (and a broken transaction for a caller inside atomic()) instead of WaitError.
    waiter = agents["joiner"].prepare("join")
    with pytest.raises(WaitError, match="no turn"):
        waiter.wait_for(bad)
    assert not Wait.objects.exists()


def test_no_waiting_on_unfinished_work_of_the_same_conversation(agents):
    conversation = agents["joiner"].conversation()
    finished = conversation.ask("first")
    queued = conversation.ask("second", submit=True)
    waiter = conversation.prepare_turn()
    with pytest.raises(WaitError, match="own conversation"):
        waiter.wait_for(queued)
    waiter.wait_for(finished)  # finished work of the same conversation is fine


def test_opposite_waits_are_a_cycle(agents):
    x = submitted(agents["joiner"], "x")
    y = submitted(agents["joiner"], "y")
    x.wait_for(y)
    assert x.status == "waiting"
    before = snapshot()
    with pytest.raises(WaitError, match="cycle"):
        y.wait_for(x)
    assert snapshot() == before


def test_a_three_party_cycle_is_refused(agents):
    x, y, z = (submitted(agents["joiner"], name) for name in "xyz")
    x.wait_for(y)
    y.wait_for(z)
    with pytest.raises(WaitError, match="cycle"):
        z.wait_for(x)


def test_the_cycle_check_counts_a_conversation_as_one_lane(agents):
    """Conservative: Y2 queues behind Y in lane B, and X (lane A) waits for Y; Y2 waiting for X
    would in fact resolve, but lanes are serial, so any path back into lane B is refused."""
    x = submitted(agents["joiner"], "x")
    lane_b = agents["joiner"].conversation()
    y = lane_b.ask("y", submit=True)
    y2 = lane_b.ask("y2", submit=True)
    x.wait_for(y)
    with pytest.raises(WaitError, match="cycle"):
        y2.wait_for(x)
    # A finished target ends the search: once Y is done nothing blocks.
    assert services.run_turn(y.id)
    services.drain()
    assert x.refresh().status == "pending"


def test_only_a_turn_that_has_not_started_can_wait(agents):
    done = agents["worker"].run("finished")
    with pytest.raises(InvalidTransition):
        done.wait_for(submitted(agents["worker"], "t"))


def test_waiting_twice_on_a_target_adds_one_edge(agents):
    target = submitted(agents["worker"], "t")
    waiter = agents["joiner"].prepare("join")
    waiter.wait_for(target, target.id)
    waiter.wait_for(target)
    assert Wait.objects.filter(waiter_id=waiter.id).count() == 1


# --------------------------------------------------------------------------- release and join


def test_submit_with_unmet_waits_is_waiting_then_joined_results_come_in_requested_order(agents):
    first = submitted(agents["worker"], "first task")
    second = submitted(agents["worker"], "second task")
    waiter = agents["joiner"].prepare("combine").wait_for(first, second).submit()
    assert waiter.status == "waiting"
    assert services.drain() == [] and waiter.refresh().status == "waiting"

    # The targets finish in the opposite order.
    assert services.run_turn(second.id)
    services.drain()
    assert waiter.refresh().status == "waiting"
    assert services.run_turn(first.id)
    services.drain()
    assert waiter.refresh().status == "pending"

    assert services.run_turn(waiter.id)
    assert waiter.refresh().status == "completed"
    (request,) = agents["requests"]
    results = joined_results(request)
    assert [r["turn_id"] for r in results] == [first.id, second.id]
    assert [r["output_text"] for r in results] == ["result of first task",
                                                   "result of second task"]
    # The task, then the results, before the first model call.
    assert [(m.role, m.text.split("\n")[0]) for m in request.messages] == [
        ("user", "combine"),
        ("user", "The turns this turn waited for have finished. Their results, in the order "
                 "they were requested:"),
    ]
    # Joined once, owned by the waiter, after its task message.
    message = Message.objects.get(turn_id=waiter.id, role="user")
    assert message.metadata == {"source": "wait_for", "targets": [first.id, second.id]}
    assert waiter.row.state["joined_message_id"] == message.pk


def test_a_failed_or_cancelled_target_is_a_structured_result(agents):
    target = submitted(agents["worker"], "doomed")
    waiter = agents["joiner"].prepare("combine").wait_for(target).submit()
    target.cancel()
    services.drain()
    assert services.run_turn(waiter.id)
    (result,) = joined_results(agents["requests"][0])
    assert result["status"] == "cancelled" and result["error"]["type"] == "Cancelled"


def test_submit_with_all_targets_finished_is_pending_and_joined_at_once(agents):
    done = agents["worker"].run("early")
    waiter = agents["joiner"].prepare("combine").wait_for(done).submit()
    assert waiter.status == "pending"
    assert services.run_turn(waiter.id)
    assert joined_results(agents["requests"][0])[0]["output_text"] == "result of early"


def test_wait_for_on_a_submitted_pending_turn_makes_it_wait(agents):
    target = submitted(agents["worker"], "t")
    waiter = submitted(agents["joiner"], "combine")
    assert waiter.wait_for(target).status == "waiting"
    assert Turn.objects.get(pk=waiter.id).status == "waiting"


def test_inline_execution_refuses_unmet_waits_and_joins_met_ones(agents):
    target = submitted(agents["worker"], "t")
    waiter = agents["joiner"].prepare("combine").wait_for(target)
    with pytest.raises(WaitError, match="submit it"):
        waiter.execute()
    assert waiter.refresh().status == "pending"
    assert services.run_turn(target.id)
    waiter.execute()
    assert waiter.status == "completed"
    assert joined_results(agents["requests"][0])[0]["turn_id"] == target.id


def test_a_waiter_past_its_deadline_is_released_without_results(agents):
    target = submitted(agents["worker"], "slow")
    waiter = agents["joiner"].prepare("combine").wait_for(target).submit()
    Turn.objects.filter(pk=waiter.id).update(deadline_at=timezone.now() - timedelta(seconds=1))
    services.drain()
    waiter.refresh()
    assert waiter.status == "pending"
    assert "joined_message_id" not in waiter.row.state
    assert not Message.objects.filter(turn_id=waiter.id).exists()


# --------------------------------------------------------------------------- authorization


def test_wait_asks_the_policy_with_the_waiter_and_its_targets(agents, policy_calls):
    target = submitted(agents["worker"], "t")
    waiter = agents["joiner"].prepare("combine", principal={"tenant": "t1"})
    with policy("tests.orchestration.allow"):
        waiter.wait_for(target)
        waiter.wait_for(target, principal={"user": 4})
    (first, second) = [c for c in policy_calls if c[0] == "wait"]
    assert first[1] == {"tenant": "t1"} and second[1] == {"user": 4}
    assert first[2]["turn_id"] == waiter.id and first[2]["target_ids"] == [target.id]


@pytest.mark.parametrize("path", DENIALS)
def test_a_denied_wait_raises_and_writes_nothing(agents, path):
    target = submitted(agents["worker"], "t")
    waiter = submitted(agents["joiner"], "combine")
    before = snapshot()
    with policy(path), pytest.raises(AuthorizationError):
        waiter.wait_for(target)
    assert snapshot() == before
    assert waiter.refresh().status == "pending"


def test_the_multi_tenant_policy_refuses_waiting_on_another_tenants_turn(agents):
    theirs = agents["worker"].prepare("t", principal={"tenant": "t2"}).submit()
    mine = agents["joiner"].prepare("combine", principal={"tenant": "t1"})
    with policy("tests.orchestration.tenant_policy"), pytest.raises(AuthorizationError):
        mine.wait_for(theirs)
    assert not Wait.objects.exists()


def test_waits_on_finished_targets_added_after_submit_still_give_their_results(agents):
    # Waits attached to a submitted pending turn whose targets have all finished leave it
    # pending (nothing to wait for), but their results are still its input: no release will
    # come later to give them.
    done = agents["worker"].run("early")
    waiter = submitted(agents["joiner"], "combine")
    assert waiter.wait_for(done).status == "pending"
    assert services.run_turn(waiter.id)
    (result,) = joined_results(agents["requests"][0])
    assert result["turn_id"] == done.id and result["output_text"] == "result of early"


def test_a_running_turn_that_waits_is_refused_as_started(agents, registered):
    target = submitted(agents["worker"], "t")
    refusals: list[str] = []

    def attempt(request: ModelRequest) -> Any:
        try:
            load_turn(running.id).wait_for(target)
        except WaitError as exc:
            refusals.append(str(exc))
        return reply("done")

    running = submitted(registered(Agent("self_waiter", client=FunctionClient(attempt))), "go")
    assert services.run_turn(running.id)
    assert running.refresh().status == "completed"
    assert len(refusals) == 1 and "already started" in refusals[0]
    assert not Wait.objects.filter(waiter_id=running.id).exists()


def test_a_turn_given_its_joined_results_refuses_new_waits_instead_of_losing_them(agents):
    # The results are given once, in one message: a wait added after they were given would
    # never reach the turn's input, so it is refused; waiting again for a target is a no-op.
    done = agents["worker"].run("early")
    waiter = agents["joiner"].prepare("combine").wait_for(done).submit()
    assert "joined_message_id" in waiter.refresh().row.state
    later = agents["worker"].run("late")
    with pytest.raises(WaitError, match="already been given"):
        waiter.wait_for(later)
    waiter.wait_for(done)
    assert list(Wait.objects.filter(waiter_id=waiter.id).values_list("target_id", flat=True)) \
        == [done.id]
    assert services.run_turn(waiter.id)
    assert [r["turn_id"] for r in joined_results(agents["requests"][0])] == [done.id]
