"""Setup that just works (issue 14): a worker set up the usual way runs background turns."""

from __future__ import annotations

import pytest

from tests.e2e.harness import Cluster, submit, wait_terminal
from turnkit_django.states import TurnStatus

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.timeout(90)
def test_a_worker_whose_celery_module_only_autodiscovers_runs_a_background_turn(
    cluster: Cluster,
) -> None:
    (worker,) = cluster.start(1, app="tests.e2e.autodiscover_celery")
    banner = worker.log.read_text(errors="replace")
    assert "[tasks]" in banner and ". turnkit.run_turn" in banner, banner

    turn_id = submit({"call": "safe_effect", "args": {"label": "autodiscover"}},
                     {"reply": "found by autodiscover"})
    row = wait_terminal([turn_id], timeout=45)[turn_id]

    assert row.status == TurnStatus.COMPLETED, (row.error, cluster.logs())
    assert row.output_text == "found by autodiscover"
    assert "Received unregistered task" not in worker.log.read_text(errors="replace")
