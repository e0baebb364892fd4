"""Two beat ticks racing for the same firing of a schedule (two beats, or one restarted while
its previous tick still ran) start one run: the firing's unique row is written in the
transaction that creates the run, so the second tick waits on it and then starts nothing."""

from __future__ import annotations

from datetime import timedelta
from functools import partial

import pytest

from tests.concurrency.threads import Race
from turnkit_django import Agent, schedule
from turnkit_django.models import ScheduleFiring, Turn
from turnkit_django.services.schedules import fire_schedules
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


def test_two_ticks_racing_for_one_firing_start_one_run(registered):
    agent = registered(Agent("scheduled", client=FunctionClient(lambda r: reply("ok"))))
    row = schedule(agent, cron="0 * * * *", task="Hourly digest", key="raced-digest")
    first = row.created_at.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)
    rounds = 20
    with Race(2) as race:
        for round_ in range(rounds):
            tick = partial(fire_schedules, first + timedelta(hours=round_, seconds=5))
            started = race.round([tick, tick])
            assert sum(len(ids) for ids in started) == 1, f"round {round_}: {started}"
    firings = list(ScheduleFiring.objects.order_by("fired_for").values_list("fired_for",
                                                                            flat=True))
    assert firings == [first + timedelta(hours=n) for n in range(rounds)]
    assert Turn.objects.filter(parent_turn__isnull=True).count() == rounds
