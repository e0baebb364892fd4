"""Schedules: ``schedule(agent, cron=..., task=..., key=...)`` and the beat tick that fires them.

The tick (``fire_schedules(now)``) is given the time it runs at; in production it reads the
database clock. Each firing starts exactly one run, keyed by (schedule, firing time).
"""

from __future__ import annotations

from datetime import datetime, timedelta

import pytest
from django.contrib.admin.sites import AdminSite

from turnkit_django import Agent, InputError, schedule
from turnkit_django.admin.schedules import ScheduleAdmin
from turnkit_django.models import Message, Schedule, ScheduleFiring, Turn
from turnkit_django.services.schedules import fire_schedules
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db


def _top_of_next_hour(after: datetime) -> datetime:
    return after.replace(minute=0, second=0, microsecond=0) + timedelta(hours=1)


@pytest.fixture
def agent(registered):
    return registered(Agent("digest_writer", client=FunctionClient(lambda r: reply("ok"))))


def runs() -> list[Turn]:
    return list(Turn.objects.filter(parent_turn__isnull=True).order_by("created_at"))


def test_a_schedule_is_created_once_per_key_and_updated_in_place(agent):
    first = schedule(agent, cron="0 9 * * 1-5", task="Daily digest", key="digest")
    again = schedule(agent, cron="30 8 * * *", task="Morning digest", key="digest",
                     missed="catch_up", principal={"user": 7})
    assert Schedule.objects.count() == 1
    assert first.pk == again.pk
    row = Schedule.objects.get(key="digest")
    assert (row.agent_name, row.cron, row.task, row.missed, row.principal, row.enabled) == (
        "digest_writer", "30 8 * * *", "Morning digest", "catch_up", {"user": 7}, True)


def test_a_due_firing_starts_one_submitted_run_and_a_second_tick_starts_none(
        agent, turnkit_dispatcher, django_capture_on_commit_callbacks):
    row = schedule(agent, cron="0 * * * *", task="Hourly digest", key="hourly")
    firing = _top_of_next_hour(row.created_at)
    assert fire_schedules(firing - timedelta(seconds=1)) == []  # not due yet
    with django_capture_on_commit_callbacks(execute=True):
        started = fire_schedules(firing + timedelta(seconds=5))
    assert fire_schedules(firing + timedelta(seconds=6)) == []  # the tick ran twice
    assert fire_schedules(firing + timedelta(seconds=30)) == []
    (run,) = runs()
    assert started == [run.pk]
    assert run.status == "pending" and run.submitted_at is not None
    assert turnkit_dispatcher.dispatched() == [run.pk]
    (message,) = Message.objects.filter(conversation_id=run.conversation_id)
    assert "Hourly digest" in str(message.content)
    assert run.conversation.metadata == {"schedule": "hourly",
                                         "fired_for": firing.isoformat()}
    (recorded,) = ScheduleFiring.objects.all()
    assert (recorded.schedule_id, recorded.fired_for, recorded.turn_id) == (row.pk, firing,
                                                                            run.pk)
    assert Schedule.objects.get(pk=row.pk).last_fired_at == firing
    # The next firing starts the next run.
    assert len(fire_schedules(firing + timedelta(hours=1, seconds=2))) == 1
    assert len(runs()) == 2


def test_missed_firings_are_skipped_by_default_and_the_next_one_fires(agent):
    row = schedule(agent, cron="0 * * * *", task="Hourly", key="hourly-skip")
    first = _top_of_next_hour(row.created_at)
    # Beat was down from before `first` until three hours later: none of the missed ones run.
    assert fire_schedules(first + timedelta(hours=3, minutes=10)) == []
    assert runs() == []
    assert Schedule.objects.get(pk=row.pk).last_fired_at == first + timedelta(hours=3)
    # The next firing after beat came back runs as usual.
    assert len(fire_schedules(first + timedelta(hours=4, seconds=3))) == 1
    assert ScheduleFiring.objects.get().fired_for == first + timedelta(hours=4)


def test_catch_up_fires_the_most_recent_missed_firing_once(agent):
    row = schedule(agent, cron="0 * * * *", task="Hourly", key="hourly-catch-up",
                   missed="catch_up")
    first = _top_of_next_hour(row.created_at)
    late = first + timedelta(hours=3, minutes=10)
    assert len(fire_schedules(late)) == 1
    assert fire_schedules(late + timedelta(seconds=20)) == []
    assert ScheduleFiring.objects.get().fired_for == first + timedelta(hours=3)


def test_a_disabled_schedule_does_not_fire(agent):
    row = schedule(agent, cron="0 * * * *", task="Hourly", key="off", enabled=False)
    assert fire_schedules(_top_of_next_hour(row.created_at) + timedelta(seconds=1)) == []


def test_a_firing_already_recorded_is_never_started_again(agent):
    """Another process recorded the firing (its tick committed first): the unique
    (schedule, firing time) stops a second run even if this tick read the schedule before."""
    row = schedule(agent, cron="0 * * * *", task="Hourly", key="raced")
    firing = _top_of_next_hour(row.created_at)
    assert len(fire_schedules(firing + timedelta(seconds=1))) == 1
    Schedule.objects.filter(pk=row.pk).update(last_fired_at=None)  # a stale read of the row
    assert fire_schedules(firing + timedelta(seconds=2)) == []
    assert len(runs()) == 1


@pytest.mark.parametrize(("cron", "words"), [
    ("0 9 * *", "5 fields"),
    ("61 * * * *", "minute"),
    ("0 25 * * *", "hour"),
    ("every day", "5 fields"),
])
def test_a_bad_cron_expression_is_refused_with_a_clear_error(agent, cron, words):
    with pytest.raises(InputError) as caught:
        schedule(agent, cron=cron, task="Digest", key="bad")
    assert repr(cron) in str(caught.value) and words in str(caught.value)
    assert Schedule.objects.count() == 0


def test_bad_arguments_are_refused(agent):
    with pytest.raises(InputError, match="missed"):
        schedule(agent, cron="0 9 * * *", task="Digest", key="k", missed="later")
    with pytest.raises(InputError, match="key"):
        schedule(agent, cron="0 9 * * *", task="Digest", key="")
    with pytest.raises(InputError, match="task"):
        schedule(agent, cron="0 9 * * *", task="  ", key="k")
    assert Schedule.objects.count() == 0


def test_the_admin_form_refuses_a_bad_cron_expression(agent, rf, admin_user):
    admin = ScheduleAdmin(Schedule, AdminSite())
    request = rf.post("/")
    request.user = admin_user
    form_class = admin.get_form(request)
    data = {"key": "digest", "agent_name": "digest_writer", "cron": "0 9 * *",
            "task": "Digest", "missed": "skip", "enabled": "on", "principal": "null"}
    form = form_class(data=data)
    assert not form.is_valid()
    assert "5 fields" in " ".join(form.errors["cron"])
    form = form_class(data={**data, "cron": "0 9 * * 1-5"})
    assert form.is_valid(), form.errors
