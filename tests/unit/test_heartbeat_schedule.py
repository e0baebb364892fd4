"""The process's heartbeat thread is not woken by turns that follow one another.

Entering a claim into the schedule and taking it out again wakes the thread only when it must
act sooner than it planned to (runtime/heartbeat.py): a thread switch at every turn's start and
end is client CPU and wall time an inline run or a worker's next task would pay for nothing.
"""

from __future__ import annotations

import pytest

from tests.dispatch import override_turnkit
from turnkit_django import Agent
from turnkit_django.runtime import heartbeat
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
