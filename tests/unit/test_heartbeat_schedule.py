"""The process's heartbeat thread is not woken by turns that follow one another.

Entering a claim into the schedule and taking it out again wakes the thread only when it must
act sooner than it planned to (runtime/heartbeat.py): a thread switch at every turn's start and
end is client CPU and wall time an inline run or a worker's next task would pay for nothing.
"""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.dispatch import override_turnkit
from turnkit_django import Agent
from turnkit_django.runtime import heartbeat
from turnkit_django.store import claim, lease_of
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


def test_turns_one_after_another_do_not_wake_the_heartbeat_thread(registered):
    agent = registered(Agent("one-after-another",
                             client=FunctionClient(lambda request: reply("ok"))))
    with override_turnkit(HEARTBEAT_INTERVAL=60):
        assert agent.run("first").status == "completed"
        woken = heartbeat._schedule.wakes
        for _ in range(5):
            assert agent.run("next").status == "completed"
        assert heartbeat._schedule.wakes == woken


def test_one_statement_beats_for_every_claim_the_process_holds(registered):
    """Many live turns in one process cost one heartbeat statement per interval, not one per
    turn; a claim whose fence moved on (its turn cancelled) stops beating, the others go on."""
    agent = registered(Agent("many-live", client=FunctionClient(lambda request: reply("ok"))))
    runs = [agent.prepare(f"task {i}") for i in range(5)]
    beats = [heartbeat.Heartbeat(claim(run.id, "a worker of many turns"), 60.0) for run in runs]
    before = {run.id: lease_of(run.id) for run in runs}

    with CaptureQueriesContext(connection) as captured:
        heartbeat.beat_all(beats)
    leases = [q["sql"] for q in captured.captured_queries if "turnkit_lease" in q["sql"]]
    assert len(leases) == 1 and leases[0].startswith("UPDATE"), captured.captured_queries
    assert all(lease_of(run.id) >= before[run.id] for run in runs)
    assert not any(beat._stopped for beat in beats)

    runs[2].cancel()  # its fence moves on: its worker lost the claim
    heartbeat.beat_all(beats)
    assert [beat._stopped for beat in beats] == [False, False, True, False, False]
    for run in runs:
        if run.id != runs[2].id:
            run.cancel()  # leave no turn running for the invariants
