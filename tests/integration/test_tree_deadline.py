"""Every turn of a tree has the root's deadline, also after a pause moved it later.

Children copy the root's ``deadline_at`` when they are created; a resume (or a decided
approval) moves the deadline later by the time the tree was paused. Maintenance releases a
waiting turn whose deadline passed, and the heartbeat gives up a call that outlives it, so a
child left with the deadline from before the pause would be treated as past a deadline the run
no longer has.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from turnkit_django import Agent, services
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import Turn
from turnkit_django.testing import Entry, FunctionClient, call, reply

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def delegating(name: str, sub: Agent | None = None) -> Agent:
    """An agent that delegates its task to ``sub`` (if any), then answers."""
    def respond(request: ModelRequest) -> Entry:
        if sub is None or request.messages[-1].role == "tool":
            return reply(f"{name} done")
        return call(sub.name, id=f"call_{sub.name}", task="go on")

    return Agent(name, description=f"The {name} agent.", sub_agents=[sub] if sub else [],
                 client=FunctionClient(respond), timeout=600)


def test_a_waiting_child_keeps_waiting_while_the_paused_runs_deadline_is_ahead(registered):
    leaf = delegating("leaf")
    mid = delegating("mid", leaf)
    run = registered(delegating("lead", mid)).submit("start")
    assert services.run_turn(run.id)  # lead fans out mid and waits
    (mid_turn,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(mid_turn.pk)  # mid fans out leaf and waits
    assert Turn.objects.get(pk=mid_turn.pk).status == "waiting"

    # The run is 30 minutes past the deadline it started with (the clock moved for every
    # turn of the tree alike), but it was paused for an hour meanwhile.
    Turn.objects.filter(root_turn_id=run.id).update(
        deadline_at=timezone.now() - timedelta(minutes=30))
    run.pause(cascade=True)
    row = Turn.objects.get(pk=run.id)
    hour_ago = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    Turn.objects.filter(pk=run.id).update(controls={**row.controls, "paused_at": hour_ago})
    run.resume(cascade=True)
    root_deadline = Turn.objects.get(pk=run.id).deadline_at
    assert root_deadline > timezone.now() + timedelta(minutes=25)

    services.drain()
    # leaf has not run: mid still waits for it, and has the run's deadline.
    mid_row = Turn.objects.get(pk=mid_turn.pk)
    assert mid_row.status == "waiting"
    assert mid_row.deadline_at == root_deadline

    # The tree then finishes within its deadline.
    (leaf_turn,) = Turn.objects.filter(parent_turn_id=mid_turn.pk)
    assert services.run_turn(leaf_turn.pk)
    assert services.run_turn(mid_turn.pk)
    assert services.run_turn(run.id)
    assert [t.status for t in Turn.objects.filter(pk__in=[leaf_turn.pk, mid_turn.pk, run.id])
            ] == ["completed"] * 3
