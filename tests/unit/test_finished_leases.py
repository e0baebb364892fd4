"""A turn's lease row goes with the transition that ends it (issue 41, history costs).

Reconcile's expired-lease query joins the lease table, so a lease left behind by every finished
turn made it grow with history. The store deletes a turn's lease in the same statement (or
transaction) as its terminal write: completed, failed, cancelled, dead-lettered or abandoned.
A running turn keeps its lease, and reconcile still recovers one whose lease expired.
Runs on SQLite here and on PostgreSQL (the one-statement fast path) in the integration tier.
"""

from __future__ import annotations

import importlib
from datetime import timedelta
from types import SimpleNamespace

import pytest

from tests.dispatch import override_turnkit
from tests.helpers import crash, expire_lease
from turnkit_django import Agent, reconcile, services
from turnkit_django.models import Lease, Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]


def leases(turn_id: str) -> int:
    return Lease.objects.filter(turn_id=turn_id).count()


@pytest.mark.parametrize(("client", "status"), [
    (FunctionClient(lambda request: reply("done")), "completed"),
    (ScriptedClient([]), "failed"),  # the model call raises
])
def test_a_finished_turn_leaves_no_lease(registered, client, status):
    agent = registered(Agent("leased", client=client))
    inline = agent.run("inline")
    run = agent.submit("background")
    services.run_turn(run.id, kind="test")
    for turn_id in (inline.id, run.id):
        assert Turn.objects.get(pk=turn_id).status == status
        assert leases(turn_id) == 0


def test_a_cancelled_or_dead_lettered_turn_leaves_no_lease(registered):
    agent = registered(Agent("leased", client=FunctionClient(lambda request: reply("done"))))
    cancelled, dead = agent.submit("cancel me"), agent.submit("give up on me")
    for run in (cancelled, dead):
        crash(run.id, "before_model_call")
        assert leases(run.id) == 1
    services.cancel(cancelled.id)
    with override_turnkit(MAX_RECOVERY_ATTEMPTS=0):
        report = reconcile()
    assert report.dead_lettered == [dead.id]
    for turn_id, status in ((cancelled.id, "cancelled"), (dead.id, "failed")):
        assert Turn.objects.get(pk=turn_id).status == status
        assert leases(turn_id) == 0


def test_reconcile_still_recovers_a_running_turn_whose_lease_expired(registered):
    agent = registered(Agent("leased", client=FunctionClient(lambda request: reply("done"))))
    finished = agent.submit("finished")
    services.run_turn(finished.id, kind="test")
    run = agent.submit("crashes")
    crash(run.id, "before_model_call")
    expire_lease(run.id, ago=timedelta(days=1))
    assert reconcile().recovered == [run.id]
    assert services.run_turn(run.id, kind="test")
    assert Turn.objects.get(pk=run.id).status == "completed" and leases(run.id) == 0


def test_migration_0020_deletes_the_leases_finished_turns_kept(registered):
    from django.apps import apps
    from django.db import connection
    from django.utils import timezone

    migration = importlib.import_module("turnkit_django.migrations.0020_history_indexes")
    agent = registered(Agent("leased", client=FunctionClient(lambda request: reply("done"))))
    finished, running = agent.submit("finished"), agent.submit("crashes")
    services.run_turn(finished.id, kind="test")
    crash(running.id, "before_model_call")
    # As the previous schema's store left it: the finished turn's lease still there.
    Lease.objects.create(turn_id=finished.id, fence=1, worker="gone",
                         heartbeat_at=timezone.now())

    migration.delete_finished_leases(apps, SimpleNamespace(connection=connection))

    assert (leases(finished.id), leases(running.id)) == (0, 1)
