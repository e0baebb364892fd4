"""Retry of a failed background run on a real Celery worker (issue 39, done-when 5).

The scripted agent's provider errors on its first call (a ``"fail"`` step, counted in the
ledger), so the run fails on a worker; ``run.retry()`` in the test process submits a new run of
the same input, linked by ``retry_of``, that a worker completes. A principal of another tenant,
who may not read the original, is refused and nothing is written.
"""

from __future__ import annotations

import pytest

from tests.e2e.harness import Cluster, submit, wait_terminal
from tests.e2e.invariants import assert_scenario_invariants
from turnkit_django import AuthorizationError, load_run
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Conversation, Turn

pytestmark = pytest.mark.django_db(transaction=True)
ACME, GLOBEX = {"tenant": "acme"}, {"tenant": "globex"}


@pytest.mark.timeout(120)
def test_a_failed_background_run_retried_is_completed_by_a_worker(cluster: Cluster,
                                                                  settings) -> None:
    settings.TURNKIT = {**settings.TURNKIT,
                        "AUTHORIZATION_POLICY": "tests.orchestration.tenant_policy"}
    cluster.start(1)
    cluster.start_reconciler()
    turn_id = submit({"fail": "retry-e2e", "reply": "refunded"}, principal=ACME)
    row = wait_terminal([turn_id], timeout=60)[turn_id]
    assert row.status == TurnStatus.FAILED and row.error["type"] == "ModelError", row.error
    run = load_run(turn_id)

    before = (Conversation.objects.count(), Turn.objects.count())
    with pytest.raises(AuthorizationError):
        run.retry(principal=GLOBEX)
    assert (Conversation.objects.count(), Turn.objects.count()) == before

    again = run.retry(principal=ACME)
    assert again.id != turn_id and again.row.retry_of_id == turn_id
    assert again.row.submitted_at is not None  # submitted, as the original was
    done = wait_terminal([again.id], timeout=60)[again.id]

    assert done.status == TurnStatus.COMPLETED, done.error
    assert done.output_text == "refunded" and done.principal == ACME
    assert [e["turn"] for e in cluster.ledger("model.fail", label="retry-e2e")] == [
        turn_id, again.id]
    assert load_run(turn_id).status == TurnStatus.FAILED  # the original stays as it ended
    assert_scenario_invariants(cluster)
