"""Maintenance cost does not grow with history, and every pass is bounded (issue 3 Done-when 4).

``drain()`` (the maintenance pass) and ``reconcile()`` read only active rows, at most
MAINTENANCE_BATCH_SIZE per query, oldest-touched first, and touch what they handled so the next
pass rotates to the others. Query counts are measured with ``CaptureQueriesContext``; time is
never asserted.
"""

from __future__ import annotations

from datetime import timedelta
from itertools import chain
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.dispatch import background, override_turnkit
from tests.factories import create_terminal_turns
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from turnkit_django import Agent, services
from turnkit_django.base.ids import new_id
from turnkit_django.base.states import TurnStatus
from turnkit_django.conf import turnkit_settings
from turnkit_django.models import Conversation, Lease, Turn
from turnkit_django.testing import FunctionClient, reply

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

# transaction=True: the passes run in autocommit like a worker, so ``Now()`` is each pass's own
# time (inside one test transaction every touch would carry the same timestamp).
pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

HISTORY = 2000
BATCH = 5
LONG_AGO = timedelta(hours=1)


def queries(action: object) -> list[str]:
    with CaptureQueriesContext(connection) as captured:
        action()  # type: ignore[operator]
    return [q["sql"] for q in captured.captured_queries]


def add_history(count: int = HISTORY) -> None:
    """``count`` finished background turns of every terminal status, with old heartbeats."""
    at = timezone.now() - timedelta(days=1)
    ids: list[str] = []
    shares = {TurnStatus.COMPLETED: count // 2, TurnStatus.FAILED: count // 4,
              TurnStatus.CANCELLED: count // 8}
    shares[TurnStatus.STALE] = count - sum(shares.values())
    for status, share in shares.items():
        ids += create_terminal_turns(share, per_conversation=4, status=status, at=at)
    Turn.objects.filter(pk__in=ids).update(submitted_at=at, fence=2)
    assert Turn.objects.terminal().background().count() == count


@pytest.fixture
def agent(registered: Any) -> Agent:
    return registered(Agent("maintained", client=FunctionClient(lambda request: reply("ok"))))


def test_one_pass_issues_the_same_queries_with_2000_terminal_turns_as_with_none() -> None:
    before_drain, before_reconcile = queries(services.drain), queries(services.reconcile)
    add_history()

    after_drain, after_reconcile = queries(services.drain), queries(services.reconcile)

    assert len(after_drain) == len(before_drain)
    assert len(after_reconcile) == len(before_reconcile)
    # Bounded reads of active rows only: limited to a batch, through the partial indexes.
    limit = f"LIMIT {int(turnkit_settings.MAINTENANCE_BATCH_SIZE)}"
    turn_selects = [q for q in after_drain + after_reconcile
                    if q.startswith("SELECT") and '"turnkit_turn"' in q.split("WHERE")[0]]
    assert turn_selects and all(limit in q for q in turn_selects), turn_selects
    if connection.vendor == "postgresql":
        assert sequential_scans(after_drain + after_reconcile) == []


def sequential_scans(sql: list[str]) -> list[str]:
    """Plans (after ANALYZE) of the SELECTs in ``sql`` that scan a turnkit table sequentially."""
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE turnkit_turn")
        found = []
        for query in (q for q in sql if q.startswith("SELECT")):
            cursor.execute(f"EXPLAIN {query}")
            plan = "\n".join(row[0] for row in cursor.fetchall())
            # A table the planner knows to be empty (autovacuum visited it after earlier tests
            # rolled their rows back) is scanned at cost 0: that reads nothing, history or not.
            if any("Seq Scan on turnkit_" in line and "cost=0.00..0.00 " not in line
                   for line in plan.splitlines()):
                found.append(f"{query}\n{plan}")
    return found


def quiet_pending(agent: Agent, count: int) -> list[str]:
    ids = [agent.prepare(f"task {i}").submit().id for i in range(count)]
    # As if submitted long ago and their doorbells lost: maintenance must re-ring them.
    for age, turn_id in enumerate(ids):
        Turn.objects.filter(pk=turn_id).update(
            updated_at=timezone.now() - LONG_AGO - timedelta(seconds=age))
    return ids


def test_drain_rings_a_batch_per_pass_and_rotates_through_pending_turns(agent: Agent) -> None:
    add_history()
    with override_turnkit(MAINTENANCE_BATCH_SIZE=BATCH):
        one_batch = quiet_pending(agent, BATCH)
        single = queries(services.drain)
        assert Turn.objects.filter(pk__in=one_batch, updated_at__lt=timezone.now() - LONG_AGO
                                   ).count() == 0, "a pass touches what it rang"
        ids = quiet_pending(agent, 3 * BATCH)

        passes = []
        for _ in range(3):
            counted = queries(lambda: passes.append(services.drain()))
            assert len(counted) == len(single), "a pass over 3 batches costs one batch"

    assert [len(p) for p in passes] == [BATCH] * 3
    assert sorted(chain.from_iterable(passes)) == sorted(ids), "three passes rang every turn once"
    assert passes[0] == ids[::-1][:BATCH], "oldest-touched first"


def test_blocked_waiters_rotate_so_every_one_is_inspected(agent: Agent) -> None:
    add_history()
    blocker = agent.prepare("blocker").submit()  # stays pending (no worker): waiters stay blocked
    waiters = []
    for index in range(3 * BATCH):
        run = agent.prepare(f"waiter {index}")
        services.add_wait(run.row, [blocker.row])
        waiters.append(run.submit().id)
    assert Turn.objects.filter(pk__in=waiters, status=TurnStatus.WAITING).count() == 3 * BATCH
    for age, turn_id in enumerate(waiters):
        Turn.objects.filter(pk=turn_id).update(updated_at=timezone.now() - LONG_AGO
                                               - timedelta(seconds=age))

    seen: list[set[str]] = []
    costs = []
    with override_turnkit(MAINTENANCE_BATCH_SIZE=BATCH):
        for _ in range(4):
            start = timezone.now()
            costs.append(len(queries(services.drain)))
            seen.append(set(Turn.objects.filter(pk__in=waiters, updated_at__gte=start)
                            .values_list("pk", flat=True)))

    assert [len(s) for s in seen] == [BATCH] * 4
    assert set().union(*seen[:3]) == set(waiters), "three passes inspect every waiter"
    assert seen[3] == seen[0], "then the rotation starts over with the longest untouched"
    assert len(set(costs)) == 1, costs
    assert Turn.objects.filter(pk__in=waiters, status=TurnStatus.WAITING).count() == 3 * BATCH


def stale_running(count: int) -> list[str]:
    """Background turns whose worker died: running, heartbeat older than the lease."""
    now = timezone.now()
    conversations, turns, leases = [], [], []
    for index in range(count):
        conversation = Conversation(id=new_id("conv"), agent_name="maintained", model="scripted")
        turn_id = new_id("turn")
        conversations.append(conversation)
        turns.append(Turn(
            id=turn_id, conversation_id=conversation.pk, root_turn_id=turn_id,
            agent_name="maintained", model="scripted", status=TurnStatus.RUNNING, fence=1,
            claimed_by="celery@gone", submitted_at=now - LONG_AGO, started_at=now - LONG_AGO,
            state={"phase": "model"},
        ))
        leases.append(Lease(turn_id=turn_id, fence=1, worker="celery@gone",
                            heartbeat_at=now - LONG_AGO - timedelta(seconds=index)))
    Conversation.objects.bulk_create(conversations)
    Turn.objects.bulk_create(turns)
    Lease.objects.bulk_create(leases)
    return [t.pk for t in turns]


def test_reconcile_recovers_a_batch_per_pass(agent: Agent) -> None:
    add_history()
    ids = stale_running(3 * BATCH)

    with override_turnkit(MAINTENANCE_BATCH_SIZE=BATCH):
        reports = [services.reconcile() for _ in range(4)]

    recovered = [r.recovered for r in reports]
    assert [len(r) for r in recovered] == [BATCH, BATCH, BATCH, 0]
    assert sorted(chain.from_iterable(recovered)) == sorted(ids)
    assert recovered[0] == ids[::-1][:BATCH], "oldest heartbeat first"
    assert all(t.status == TurnStatus.PENDING and t.recovery_attempts == 1 and t.fence == 2
               for t in Turn.objects.filter(pk__in=ids))


def test_a_running_turn_without_a_lease_is_recovered_first_on_every_database(
        agent: Agent) -> None:
    """No heartbeat is older than any: the turn sorts first (PostgreSQL put NULLs last, SQLite
    first, so which turns a full batch recovered depended on the database)."""
    ids = stale_running(BATCH)
    (orphan,) = stale_running(1)
    Lease.objects.filter(turn_id=orphan).delete()

    with override_turnkit(MAINTENANCE_BATCH_SIZE=BATCH):
        first = services.reconcile().recovered

    assert first[0] == orphan and first[1:] == ids[::-1][:BATCH - 1]
