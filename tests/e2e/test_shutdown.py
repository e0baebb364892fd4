"""A warm shutdown hands the turn back at a step boundary (issue 10, item 6).

systemd's default ``KillMode=control-group`` sends SIGTERM to every process of the worker's
unit, prefork pool children included. The child running a turn finishes the step it is in
(here: a tool with a side effect), records its result, hands the turn back (pending, to be
resumed at once by another worker, no recovery counted) and exits; nothing becomes "outcome
unknown" and nothing runs twice.
"""

from __future__ import annotations

import signal

import pytest

from tests.e2e.harness import Cluster, submit, wait_for, wait_terminal
from turnkit_django.models import Message, Turn
from turnkit_django.testing.verify import assert_invariants

pytestmark = [pytest.mark.django_db(transaction=True)]


@pytest.mark.timeout(120)
def test_sigterm_to_the_worker_group_lets_the_running_tool_finish(cluster: Cluster) -> None:
    (worker,) = cluster.start(1)
    cluster.start_reconciler()
    turn_id = submit({"call": "unsafe_effect", "args": {"label": "once", "hold": "term"}},
                     {"reply": "done"})
    cluster.wait_ledger("gate.blocked", gate="term")

    worker.signal(signal.SIGTERM)  # main process and pool children, as systemd does
    cluster.open_gate("term")
    wait_for(lambda: not worker.alive(), timeout=45, what="the worker to shut down")
    handed_back = Turn.objects.get(pk=turn_id)
    cluster.start(1)
    row = wait_terminal([turn_id], timeout=60)[turn_id]

    assert handed_back.status in ("pending", "completed"), handed_back.status
    assert row.status == "completed" and row.output_text == "done", row.error
    assert row.recovery_attempts == 0
    assert len(cluster.ledger("effect", turn=turn_id)) == 1
    (result,) = Message.objects.filter(turn_id=turn_id, kind="tool_result")
    assert result.content[0]["content"] == "once: done"
    assert_invariants(turn_ids=[turn_id])
