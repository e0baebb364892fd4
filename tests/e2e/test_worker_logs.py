"""A real ``celery worker`` logs one line per turn outcome (issue 40): which turn, its agent, how
it ended, and who took it when a cancel fenced the worker out in the middle of a tool."""

from __future__ import annotations

import re

import pytest

from tests.e2e.harness import Cluster, Worker, submit, wait_for, wait_terminal
from tests.testapp.agents import SCRIPTED_AGENT
from turnkit_django import load_run
from turnkit_django.base.states import TurnStatus

pytestmark = pytest.mark.django_db(transaction=True)


def _line(worker: Worker, pattern: str) -> str:
    def found() -> str:
        match = re.search(pattern, worker.log.read_text(errors="replace"))
        return match.group(0) if match else ""
    return wait_for(found, timeout=15, what=f"{pattern!r} in {worker.name}'s log")


@pytest.mark.timeout(120)
def test_the_worker_logs_each_turn_s_outcome_in_one_line(cluster: Cluster) -> None:
    (worker,) = cluster.start(1)
    completed = submit({"call": "safe_effect", "args": {"label": "logged"}}, {"reply": "done"})
    assert wait_terminal([completed], timeout=45)[completed].status == TurnStatus.COMPLETED

    _line(worker, rf"INFO/\S+\] turn {completed} \({SCRIPTED_AGENT}\) completed in "
                  r"\d+\.\d\ds after 3 steps\n")
    # Celery's own line says what the task did, not "None".
    _line(worker, rf"Task turnkit\.run_turn\[[\w-]+\] succeeded in [\d.]+s: "
                  rf"\{{'turn_id': '{completed}', 'agent': '{SCRIPTED_AGENT}', "
                  r"'outcome': 'completed'")

    cancelled = submit({"call": "unsafe_effect", "args": {"label": "cut", "hold": "cut"}},
                       {"reply": "never"})
    cluster.wait_ledger("gate.blocked", gate="cut")
    load_run(cancelled).cancel()
    cluster.open_gate("cut")
    _line(worker, rf"turn {cancelled} \({SCRIPTED_AGENT}\) fenced out in \d+\.\d\ds after 2 "
                  r"steps: the turn was cancelled while it ran\n")
    assert "Traceback" not in worker.log.read_text(errors="replace")
