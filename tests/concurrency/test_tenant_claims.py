"""Tenant limits under contention (issue 37, "Fairness between tenants"): claims of one
tenant's turns racing from several connections never leave more than its ``concurrency`` running.
"""

from __future__ import annotations

from functools import partial

import pytest
from django.db import transaction

from tests.concurrency.threads import Race
from tests.dispatch import override_turnkit
from turnkit_django import Agent, store
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

RACERS = 6


def tenant_of(principal):
    return principal.get("tenant") if isinstance(principal, dict) else None


def requeue(turn_id: str) -> None:
    with transaction.atomic():
        store.lock_tree(turn_id)
        store.revoke(Turn.objects.get(pk=turn_id), "requeue", reason="test: next round")


def test_racing_claims_of_one_tenant_never_run_more_than_its_limit():
    limits = {"key": "tests.concurrency.test_tenant_claims.tenant_of", "concurrency": 2}
    with override_turnkit(TENANT_LIMITS=limits):
        agent = Agent("tenanted", client=FunctionClient(lambda request: reply("unused")))
        runs = [agent.submit(f"a{i}", principal={"tenant": "a"}) for i in range(RACERS)]
        other = agent.submit("b", principal={"tenant": "b"})
        with Race(RACERS) as race:
            for round_ in range(30):
                claims = race.round([partial(store.claim, run.id, f"racer-{i}")
                                     for i, run in enumerate(runs)])
                winners = [c for c in claims if c is not None]
                running = Turn.objects.tenant_running("a").count()
                assert len(winners) == running == 2, f"round {round_}: {len(winners)} won"
                for claim in winners:
                    requeue(claim.turn_id)
        assert store.claim(other.id, "b-worker") is not None  # another tenant is not held up
