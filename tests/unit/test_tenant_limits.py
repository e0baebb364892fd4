"""Fairness between tenants (issue 37): ``TURNKIT["TENANT_LIMITS"]``.

A tenant's turns over its limit wait as pending rows: the claim refuses them (the task returns
without work), the end of one of the tenant's running turns rings the next, and maintenance rings
them once the tenant has a free place. Another tenant's turn is claimable at once.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.db import transaction
from django.utils import timezone

import turnkit_django
from tests.dispatch import clear, override_turnkit, recorded
from tests.helpers import expire_lease
from turnkit_django import Agent, services
from turnkit_django.exceptions import ConfigurationError
from turnkit_django.models import Turn
from turnkit_django.store import claim
from turnkit_django.testing import FunctionClient, in_memory_dispatcher, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]

LIMITS = {"key": "tests.unit.test_tenant_limits.tenant_of", "concurrency": 2}


def tenant_of(principal):
    """The tenant key of a test principal: its ``tenant`` entry."""
    return principal.get("tenant") if isinstance(principal, dict) else None


def running(tenant: str) -> int:
    return Turn.objects.filter(tenant=tenant, status="running").count()


@pytest.fixture
def limited():
    with override_turnkit(TENANT_LIMITS=LIMITS):
        yield


@pytest.mark.usefixtures("limited")
def test_a_tenant_runs_at_most_its_limit_and_another_tenant_is_not_delayed(
        registered, django_capture_on_commit_callbacks):
    peaks: list[tuple[str, int]] = []

    def respond(request):
        peaks.append((request.messages[-1].text, running("a")))
        return reply("done")

    client = FunctionClient(respond)
    agent = registered(Agent("worker", client=client))
    a = [agent.submit(f"a{i}", principal={"tenant": "a"}) for i in range(6)]
    b = agent.submit("b0", principal={"tenant": "b"})
    assert {run.row.tenant for run in a} == {"a"} and b.row.tenant == "b"
    clear()

    # Two workers elsewhere hold two of a's turns: the limit is reached.
    assert claim(a[0].id, "elsewhere") is not None
    assert claim(a[1].id, "elsewhere") is not None
    # A third is refused: the task returns without work, the turn stays pending (durably).
    assert services.run_turn(a[2].id, kind="test") is False
    assert client.requests == [] and Turn.objects.get(pk=a[2].id).status == "pending"
    # Tenant b's single turn is claimable at once.
    assert services.run_turn(b.id, kind="test") is True
    assert Turn.objects.get(pk=b.id).status == "completed"

    # Maintenance does not ring a's waiting turns while a has no free place.
    Turn.objects.filter(status="pending").update(updated_at=timezone.now() - timedelta(hours=1))
    clear()
    assert turnkit_django.reconcile().dispatched == []

    # One of a's turns ends (its worker died; recovery hands it back, it runs here): each end
    # rings a's next pending turn, so a's queue drains two at a time, oldest first.
    for held in a[:2]:
        expire_lease(held.id)
        with django_capture_on_commit_callbacks(execute=True):
            assert turnkit_django.reconcile().recovered == [held.id]
        in_memory_dispatcher.run_dispatched()

    assert {r.status for r in Turn.objects.all()} == {"completed"}
    assert max(count for _, count in peaks) <= 2
    assert [task for task, _ in peaks] == ["b0", "a0", "a2", "a3", "a4", "a5", "a1"]


@pytest.mark.usefixtures("limited")
def test_maintenance_rings_the_oldest_waiting_turn_once_the_tenant_has_a_free_place(
        registered, django_capture_on_commit_callbacks):
    agent = registered(Agent("worker", client=FunctionClient(lambda request: reply("done"))))
    a = [agent.submit(f"a{i}", principal={"tenant": "a"}) for i in range(4)]
    assert claim(a[0].id, "elsewhere") is not None
    assert claim(a[1].id, "elsewhere") is not None
    Turn.objects.filter(status="pending").update(updated_at=timezone.now() - timedelta(hours=1))
    clear()
    assert turnkit_django.reconcile().dispatched == []

    a[0].cancel()  # a place frees without a worker's run ending
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert turnkit_django.reconcile().dispatched == [a[2].id]
    assert recorded() == [a[2].id]


def test_a_turn_without_a_tenant_key_or_without_the_setting_has_no_limit(registered):
    agent = registered(Agent("worker", client=FunctionClient(lambda request: reply("done"))))
    with override_turnkit(TENANT_LIMITS=LIMITS):
        free = [agent.submit(f"f{i}", principal={"user": 1}) for i in range(3)]
    assert {run.row.tenant for run in free} == {None}
    assert all(claim(run.id, "elsewhere") is not None for run in free)
    unset = [agent.submit(f"u{i}", principal={"tenant": "a"}) for i in range(3)]
    assert {run.row.tenant for run in unset} == {None}


def test_a_tenant_key_that_is_no_string_is_a_clear_error(registered):
    agent = registered(Agent("worker", client=FunctionClient(lambda request: reply("done"))))
    with override_turnkit(TENANT_LIMITS=LIMITS), pytest.raises(
            ConfigurationError, match=r"TENANT_LIMITS.*returned 7.*non-empty string"):
        agent.submit("x", principal={"tenant": 7})


@pytest.mark.usefixtures("limited")
def test_a_submission_over_the_tenant_limit_rings_no_doorbell(
        registered, django_capture_on_commit_callbacks):
    agent = registered(Agent("worker", client=FunctionClient(lambda request: reply("done"))))
    clear()
    # A burst rings as many doorbells as the tenant has free places, oldest first: the rest
    # wait as rows, with no message in the broker for a worker to take and refuse.
    with django_capture_on_commit_callbacks(execute=True):
        a = [agent.submit(f"a{i}", principal={"tenant": "a"}) for i in range(5)]
    assert recorded() == [a[0].id, a[1].id]
    clear()
    # Another tenant's submission rings at once.
    with django_capture_on_commit_callbacks(execute=True):
        b = agent.submit("b0", principal={"tenant": "b"})
    assert recorded() == [b.id]
    clear()
    # The end of one of a's turns rings a's next waiting turn.
    assert claim(a[1].id, "elsewhere") is not None
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(a[0].id, kind="test") is True
    assert recorded() == [a[2].id]
    clear()
    # A submission while the tenant is full rings nothing ...
    assert claim(a[2].id, "elsewhere") is not None
    with django_capture_on_commit_callbacks(execute=True):
        late = agent.submit("a5", principal={"tenant": "a"})
    assert recorded() == []
    # ... and one whose tenant gets a place before its submission commits rings: the check is
    # made after the commit, so a turn ending meanwhile either sees it or leaves it the place.
    assert [r.status for r in Turn.objects.filter(pk__in=[a[3].id, a[4].id, late.id])] == [
        "pending"] * 3
    Turn.objects.filter(pk__in=[a[3].id, a[4].id, late.id]).delete()
    with django_capture_on_commit_callbacks(execute=True), transaction.atomic():
        last = agent.submit("a6", principal={"tenant": "a"})
        a[1].cancel()
    assert recorded() == [last.id]
