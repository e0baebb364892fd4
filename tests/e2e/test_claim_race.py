"""Scenario 7: claim races between processes, 300 rounds, exactly one winner per round.

Four racer processes (``tests/e2e/racer.py``) meet at a barrier before every round and claim at
once. Even rounds: all four claim the same fresh turn (the compare-and-set on the fence). Odd
rounds: each claims a different submitted turn of one conversation (the serial lane: only the
oldest may run, and the partial unique index would turn a second winner into an error).
"""

from __future__ import annotations

import multiprocessing
from collections import Counter
from datetime import timedelta

import pytest
from django.utils import timezone

from tests.e2e.harness import Cluster, wait_for
from tests.e2e.invariants import assert_scenario_invariants
from tests.e2e.racer import race
from tests.testapp.agents import SCRIPTED_AGENT
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.ids import new_id
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Conversation, Turn

pytestmark = pytest.mark.django_db(transaction=True)

ROUNDS = 300
RACERS = 4


def make_rounds() -> list[list[str]]:
    """Fresh pending turns for every round, bulk-created (the race, not the setup, is tested).

    Even rounds: one inline turn. Odd rounds: RACERS submitted turns of one conversation,
    submitted one millisecond apart, oldest first.
    """
    agent = get_agent(SCRIPTED_AGENT)
    now = timezone.now()
    conversations, turns, rounds = [], [], []
    for number in range(ROUNDS):
        conversation = Conversation(id=new_id("conv"), agent_name=agent.name, model="scripted")
        conversations.append(conversation)
        lane = []
        for index in range(1 if number % 2 == 0 else RACERS):
            turn_id = new_id("turn")
            turns.append(Turn(
                id=turn_id, conversation_id=conversation.pk, root_turn_id=turn_id,
                agent_name=agent.name, model="scripted", options={"context": {}},
                submitted_at=None if number % 2 == 0 else now + timedelta(milliseconds=index),
            ))
            lane.append(turn_id)
        rounds.append(lane)
    Conversation.objects.bulk_create(conversations)
    Turn.objects.bulk_create(turns)
    return rounds


@pytest.mark.timeout(180)
def test_s7_claim_race_between_processes_has_one_winner_per_round(
        cluster: Cluster) -> None:
    rounds = make_rounds()
    context = multiprocessing.get_context("spawn")
    barrier = context.Barrier(RACERS)
    racers = [context.Process(target=race, daemon=True, name=f"racer{i}",
                              args=(i, cluster.database_name, str(cluster.ledger_path), rounds,
                                    barrier))
              for i in range(RACERS)]
    for racer in racers:
        racer.start()
    try:
        wait_for(lambda: not any(r.is_alive() for r in racers), timeout=150,
                 what="the racers to finish", interval=0.2)
    finally:
        for racer in racers:
            if racer.is_alive():
                racer.kill()
            racer.join(10)
    assert [r.exitcode for r in racers] == [0] * RACERS

    assert cluster.ledger("claim.error") == []
    claims = cluster.ledger("claim")
    winners = Counter(c["round"] for c in claims)
    assert winners == Counter(range(ROUNDS)), "exactly one winner per round"
    turns = Turn.objects.in_bulk([t for r in rounds for t in r])
    for claim in claims:
        number, turn = claim["round"], turns[claim["turn"]]
        assert (turn.status, turn.fence, turn.claimed_by) == (
            TurnStatus.RUNNING, claim["fence"], claim["identity"]) and claim["fence"] == 1
        if number % 2:
            assert claim["turn"] == rounds[number][0], "the lane runs the oldest turn first"
            assert [turns[t].status for t in rounds[number][1:]] == [TurnStatus.PENDING] * 3
    assert_scenario_invariants(cluster)
