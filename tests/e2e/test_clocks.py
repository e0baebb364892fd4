"""Every time comparison uses the database clock (issue 10, item 5).

Workers and submitters run with their wall clock skewed by libfaketime (the database server's
clock is the real one): a worker 400 s ahead must not time out healthy turns, and a submitter
90 s ahead whose doorbell is lost must be picked up by maintenance within seconds.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from tests.e2e.harness import REPO, skewed_clock, submit, wait_terminal

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_a_worker_400_seconds_ahead_completes_healthy_turns(cluster):
    cluster.start(1, env=skewed_clock("+400s"))
    cluster.start_reconciler()
    ids = [submit({"reply": f"healthy {n}"}) for n in range(3)]

    rows = wait_terminal(ids, timeout=60)

    assert {row.status for row in rows.values()} == {"completed"}, [
        row.error for row in rows.values()]


def test_a_submitter_90_seconds_ahead_with_a_lost_doorbell_is_found_within_seconds(cluster):
    cluster.start(1)
    cluster.start_reconciler()
    env = {**cluster.env("submitter"), **skewed_clock("+90s")}
    started = time.monotonic()
    output = subprocess.run([sys.executable, "-m", "tests.e2e.submit_skewed"], cwd=REPO,
                            env=env, capture_output=True, text=True, check=True, timeout=60)
    turn_id = output.stdout.strip().splitlines()[-1]

    (row,) = wait_terminal([turn_id], timeout=30).values()

    assert row.status == "completed" and row.output_text == "found without its doorbell"
    assert time.monotonic() - started < 30
    assert os.environ.get("FAKETIME") is None  # the test process itself runs on real time
