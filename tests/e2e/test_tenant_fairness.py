"""Fairness between tenants (issue 37): one tenant's burst does not hold up another's turn.

One ``celery worker --pool threads`` process with more threads than the tenant limit, and
``TENANT_LIMITS`` concurrency LIMIT in the workers and in the test process. Tenant ``a`` submits
BURST turns whose model call takes a moment; its first LIMIT turns are held inside that call
until tenant ``b`` has submitted its one turn, so ``a``'s backlog is certain to be there when
``b`` arrives. Then ``a`` drains LIMIT at a time while ``b``'s turn goes through: it completes
before most of ``a``'s, ``a`` never has more than LIMIT turns running (sampled from the
database, and derived from the order of the model calls in the ledger), and every turn
completes. The time bound itself (within two single-turn latencies) is measured by the
benchmark (``scripts/bench.sh tenants``), not asserted here.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.e2e.harness import Cluster, submit, wait_for, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from tests.e2e.worker_settings import E2E_TURNKIT, tenant_limits
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Turn

pytestmark = pytest.mark.django_db(transaction=True)

BURST = 200
LIMIT = 4
THREADS = 16
MODEL_SECONDS = 0.25


def peak_model_calls(entries: list[dict[str, Any]], turns: set[str]) -> int:
    """The most model calls of ``turns`` in progress at once, in the ledger's append order (a
    call starts with its ``model`` entry and ends with its ``model.done``): a turn calls its
    model only while it is claimed, so this never exceeds its tenant's running turns."""
    now = peak = 0
    for entry in entries:
        if entry.get("turn") not in turns:
            continue
        if entry["ev"] == "model":
            now += 1
            peak = max(peak, now)
        elif entry["ev"] == "model.done":
            now -= 1
    return peak


@pytest.mark.timeout(300)
def test_one_tenants_burst_does_not_hold_up_another_tenants_turn(
        cluster: Cluster, settings: Any) -> None:
    settings.TURNKIT = {**E2E_TURNKIT, "TENANT_LIMITS": tenant_limits(LIMIT)}
    held = cluster.gates / "tenant-a.hold"
    held.touch()
    cluster.start(1, pool="threads", concurrency=THREADS,
                  env={"TURNKIT_E2E_TENANT_LIMIT": str(LIMIT), "TURNKIT_E2E_DB_POOL": "8"})
    cluster.start_reconciler()
    burst = [submit({"reply": f"a-{i}", "hold": "tenant-a", "seconds": MODEL_SECONDS},
                    principal={"tenant": "a"}) for i in range(BURST)]
    cluster.wait_ledger("hold.waiting", count=LIMIT, timeout=60)
    assert Turn.objects.tenant_running("a").count() == LIMIT
    assert Turn.objects.filter(pk__in=burst, status=TurnStatus.PENDING).count() == BURST - LIMIT

    other = submit({"reply": "b"}, principal={"tenant": "b"})
    held.unlink()  # a's burst drains from now on, LIMIT at a time

    peak = 0

    def b_done() -> bool:
        nonlocal peak
        peak = max(peak, Turn.objects.tenant_running("a").count())
        return Turn.objects.filter(pk=other, status=TurnStatus.COMPLETED).exists()

    wait_for(b_done, timeout=90, what="tenant b's turn to complete")
    b = Turn.objects.get(pk=other)
    a_before_b = Turn.objects.filter(pk__in=burst, completed_at__lt=b.completed_at).count()
    assert a_before_b < BURST // 4, f"{a_before_b} of a's turns completed before b's one"

    def a_done() -> bool:
        nonlocal peak
        peak = max(peak, Turn.objects.tenant_running("a").count())
        return Turn.objects.filter(pk__in=burst, status__in=[
            TurnStatus.COMPLETED, TurnStatus.FAILED, TurnStatus.CANCELLED]).count() == BURST

    wait_for(a_done, timeout=240, what=f"a's {BURST} turns to finish", interval=0.02)
    rows = wait_terminal([*burst, other], timeout=10)
    assert {row.status for row in rows.values()} == {TurnStatus.COMPLETED}, {
        row.pk: row.error for row in rows.values() if row.status != TurnStatus.COMPLETED}
    assert peak <= LIMIT, f"tenant a had {peak} turns running at once"
    assert peak_model_calls(cluster.ledger(), set(burst)) == LIMIT
    assert_scenario_invariants(cluster)
