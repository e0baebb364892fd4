"""Claims under contention (issue 2, done-when 3a; architecture sections 5 and 6).

Racers are threads, each with its own PostgreSQL connection, released together by a barrier.
"""

from __future__ import annotations

import threading
from functools import partial
from itertools import pairwise

import pytest
from django.db import IntegrityError, connection, transaction

from tests.concurrency.threads import Race, Worker
from tests.dispatch import recorded
from turnkit_django import Agent, services, store
from turnkit_django.models import Message, Turn
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

RACERS = 4


def never_called(request: object) -> object:
    raise AssertionError("this test claims turns; it never runs them")


def revoke_to_pending(turn_id: str) -> int:
    """Revoke the current claim the way reconcile does for a dead worker; return the new fence."""
    with transaction.atomic():
        store.lock_tree(Turn.objects.get(pk=turn_id).root_turn_id)
        return store.revoke(Turn.objects.get(pk=turn_id), "requeue",
                            reason="test: next round")


def test_claim_race_has_one_winner_per_round_and_fences_strictly_increase():
    run = Agent("contested", client=FunctionClient(never_called)).prepare("claim me")
    fences: list[int] = []
    revoked: list[int] = []
    with Race(RACERS) as race:
        for round_ in range(200):
            claims = race.round([partial(store.claim, run.id, f"racer-{i}")
                                 for i in range(RACERS)])
            winners = [c for c in claims if c is not None]
            assert len(winners) == 1, f"round {round_}: {len(winners)} winners"
            (claim,) = winners
            row = Turn.objects.get(pk=run.id)
            assert (row.status, row.fence, row.claimed_by) == ("running", claim.fence,
                                                                claim.worker)
            fences.append(claim.fence)
            revoked.append(revoke_to_pending(run.id))
    # Every claim and every revocation moves the fence by one: each winner holds a fence above
    # every fence handed out or revoked before it.
    assert all(earlier < later for earlier, later in pairwise(fences))
    assert revoked == [fence + 1 for fence in fences]
    assert fences == list(range(1, 400, 2))
    row = Turn.objects.get(pk=run.id)
    assert (row.status, row.fence) == ("pending", 400)
    assert [entry["fence"] for entry in row.fence_log] == fences


def test_submitted_turns_of_one_conversation_are_claimed_in_order_under_contention(registered):
    agent = registered(Agent("lane", client=FunctionClient(never_called)))
    with Race(RACERS) as race:
        for round_ in range(50):
            conversation = agent.conversation()
            first = conversation.ask("first", submit=True)
            second = conversation.ask("second", submit=True)
            targets = [second.id, first.id] * (RACERS // 2)
            claims = race.round([partial(store.claim, turn_id, f"racer-{i}")
                                 for i, turn_id in enumerate(targets)])
            winners = [c.turn_id for c in claims if c is not None]
            assert winners == [first.id], f"round {round_}: {winners}"


def test_concurrent_run_turn_for_the_same_turn_executes_it_once(registered):
    client = FunctionClient(lambda request: reply("done"))
    agent = registered(Agent("doorbell", client=client))
    runs = [agent.submit(f"task {i}") for i in range(25)]
    assert recorded() == [run.id for run in runs]  # dispatched once each, after commit
    with Race(2) as race:
        for run in runs:
            ran = race.round([partial(services.run_turn, run.id, kind="test")] * 2)
            assert sorted(ran) == [False, True], run.id
    assert len(client.requests) == len(runs)
    assert {r.metadata["turn_id"] for r in client.requests} == {run.id for run in runs}
    assert set(Turn.objects.values_list("status", flat=True)) == {"completed"}
    assert Message.objects.filter(role="assistant").count() == len(runs)


def test_one_conversation_runs_its_submitted_turns_one_at_a_time_in_order(registered):
    lock = threading.Lock()
    order: list[str] = []
    active = {"now": 0, "max": 0}
    first_started = threading.Event()
    release_first = threading.Event()
    first_id: list[str] = []

    def respond(request):
        turn_id = request.metadata["turn_id"]
        with lock:
            order.append(turn_id)
            active["now"] += 1
            active["max"] = max(active["max"], active["now"])
        try:
            if turn_id in first_id:
                first_started.set()
                assert release_first.wait(30), "the test never released the first turn"
            return reply(f"answer to {turn_id}")
        finally:
            with lock:
                active["now"] -= 1

    agent = registered(Agent("serial", client=FunctionClient(respond)))
    conversation = agent.conversation()
    first = conversation.ask("one", submit=True)
    second = conversation.ask("two", submit=True)
    first_id.append(first.id)

    # FIFO: the second turn waits for the first even before the first is claimed.
    assert store.claim(second.id, "eager") is None
    worker = Worker(services.run_turn, first.id, kind="test")
    worker.start()
    assert first_started.wait(30)
    try:
        assert Turn.objects.get(pk=first.id).status == "running"
        assert store.claim(second.id, "eager") is None
        assert services.run_turn(second.id, kind="test") is False
        # The database refuses a second running submitted turn in the conversation by itself.
        with pytest.raises(IntegrityError), transaction.atomic():
            Turn.objects.filter(pk=second.id).update(status="running")
    finally:
        release_first.set()
    assert worker.outcome() is True
    assert services.run_turn(second.id, kind="test") is True
    assert list(Turn.objects.filter(conversation_id=conversation.id).values_list(
        "status", flat=True)) == ["completed", "completed"]
    assert order == [first.id, second.id]
    assert active["max"] == 1


def test_the_one_running_submitted_turn_index_exists():
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, Turn._meta.db_table)
    index = constraints["turnkit_one_running_submitted_turn"]
    assert index["unique"] is True
    assert index["columns"] == ["conversation_id"]
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexdef FROM pg_indexes WHERE indexname = %s",
                       ["turnkit_one_running_submitted_turn"])
        (definition,) = cursor.fetchone()
    assert "WHERE" in definition and "running" in definition and "submitted_at" in definition
