"""Issue 39, Done-when 4: a schedule firing every second, with beat and the worker each
restarted twice during a minute, starts exactly one run per firing, and misses none.

Real processes throughout: ``celery beat`` (turnkit's entries, every ``RECONCILE_INTERVAL`` = 1 s)
sends the ``turnkit.schedules`` tick, a real worker runs it and the runs it starts. A restart is
a warm shutdown (SIGTERM) and a new process; the restarts are spread over the minute (beat at
12 s, the worker at 24 s, beat at 36 s, the worker at 48 s; beat stopped once the firing of 60 s
is recorded), each made once the schedule's firings reached that second. Restarts are far
shorter than the grace (a minute), so the firings that came while beat or the worker was down
are late, not missed: the next tick starts each of them once. About 70 s.
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest

from tests.e2e.beat import start_beat
from tests.e2e.harness import Cluster, queued, script, wait_for, wait_terminal
from tests.testapp.agents import SCRIPTED_AGENT
from turnkit_django import schedule
from turnkit_django.models import ScheduleFiring, Turn
from turnkit_django.store import database_now

KEY = "every-second"
MINUTE = 60  # seconds of firings the test covers


def fired() -> list[ScheduleFiring]:
    return list(ScheduleFiring.objects.filter(schedule__key=KEY).order_by("fired_for"))


def reached(first: datetime, second: int) -> None:
    """Wait until the firing ``second`` seconds after the first one is recorded (a worker ran
    the tick that started it): the schedule's own clock, not a sleep."""
    moment = first + timedelta(seconds=second)
    wait_for(ScheduleFiring.objects.filter(schedule__key=KEY, fired_for__gte=moment).exists,
             timeout=60, what=f"the firing of second {second}")


def _first_second_after(moment: datetime) -> datetime:
    return moment.replace(microsecond=0) + timedelta(seconds=1)


@pytest.mark.django_db(transaction=True)
def test_an_every_second_schedule_starts_one_run_per_firing_across_beat_and_worker_restarts(
        cluster: Cluster):
    row = schedule(SCRIPTED_AGENT, every=1, task=script({"reply": "tick"}), key=KEY)
    first = _first_second_after(row.created_at)
    (worker,) = cluster.start(1)
    beat = start_beat(cluster)
    for second, restart in ((12, "beat"), (24, "worker"), (36, "beat"), (48, "worker")):
        reached(first, second)
        if restart == "beat":
            beat.stop()
            beat = start_beat(cluster)
        else:
            worker.stop()
            (worker,) = cluster.start(1)
    reached(first, MINUTE)
    stopping_at = database_now()  # before the stop: a loaded machine may take seconds to stop
    beat.stop()
    # The ticks beat sent before it stopped run; then nothing more fires.
    wait_for(lambda: queued() == 0, timeout=60, what="the queue to drain")
    firings = fired()
    runs = wait_terminal([f.turn_id for f in firings], timeout=60)

    # Every second from the first one after the schedule was created, none missed...
    assert [f.fired_for for f in firings] == [first + timedelta(seconds=i)
                                              for i in range(len(firings))]
    assert firings[-1].fired_for >= stop_floor(stopping_at)
    assert len(firings) >= MINUTE + 1
    # ...each with exactly one run, which completed.
    assert all(f.turn_id for f in firings)
    assert len({f.turn_id for f in firings}) == len(firings)
    scheduled = Turn.objects.filter(conversation__metadata__schedule=KEY)
    assert scheduled.count() == len(firings)
    assert sorted(str(t.pk) for t in scheduled) == sorted(str(f.turn_id) for f in firings)
    assert {t.status for t in runs.values()} == {"completed"}
    for f in firings:
        assert runs[f.turn_id].conversation.metadata["fired_for"] == f.fired_for.isoformat()


def stop_floor(stopped_at: datetime) -> datetime:
    """The earliest the last firing can be: beat's last tick was sent at most one interval
    before it stopped, and ran (reading the clock) after it was sent."""
    return stopped_at.replace(microsecond=0) - timedelta(seconds=3)
