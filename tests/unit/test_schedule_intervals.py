"""Interval schedules: ``schedule(agent, every=seconds, task=..., key=...)``.

Firings are the multiples of ``every`` seconds since the Unix epoch (UTC), so every process
computes the same ones from the database clock. Each tick starts every firing it sees within
the grace once (not only the latest), so a sub-interval schedule misses none while beat runs.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest
from django.contrib.admin.sites import AdminSite
from django.db import IntegrityError, transaction

from turnkit_django import Agent, InputError, schedule
from turnkit_django.admin.schedules import ScheduleAdmin
from turnkit_django.base.intervals import interval_firings, latest_interval_firing
from turnkit_django.models import Schedule, ScheduleFiring
from turnkit_django.services.schedules import fire_schedules
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db

T0 = datetime(2026, 12, 5, 14, 0, 0, tzinfo=UTC)


@pytest.fixture
def agent(registered):
    return registered(Agent("ticker", client=FunctionClient(lambda r: reply("ok"))))


def _aligned_after(moment: datetime, every: int) -> datetime:
    return latest_interval_firing(every, moment - timedelta(days=1), moment) + timedelta(
        seconds=every)


def fired() -> list[datetime]:
    return list(ScheduleFiring.objects.order_by("fired_for").values_list("fired_for", flat=True))


def test_interval_firings_are_epoch_aligned_multiples():
    start = T0 + timedelta(seconds=2, microseconds=500)
    assert interval_firings(5, start, T0 + timedelta(seconds=16)) == [
        T0 + timedelta(seconds=5), T0 + timedelta(seconds=10), T0 + timedelta(seconds=15)]
    assert interval_firings(7, T0, T0 + timedelta(seconds=1)) == []
    assert latest_interval_firing(1, T0, T0 + timedelta(seconds=3, microseconds=9)) == (
        T0 + timedelta(seconds=3))
    assert latest_interval_firing(60, T0, T0 + timedelta(seconds=59)) is None
    assert latest_interval_firing(7, T0 - timedelta(days=1), T0).timestamp() % 7 == 0


def test_an_every_second_schedule_fires_each_second_once_even_with_late_ticks(agent):
    row = schedule(agent, every=1, task="Tick", key="tick")
    assert (row.every, row.cron) == (1, "")
    first = _aligned_after(row.created_at, 1)
    # Ticks at irregular moments, one of them 3.5 s late: every second still fires, once.
    for offset in (0.2, 1.1, 1.9, 5.4, 5.5, 6.01):
        fire_schedules(first + timedelta(seconds=offset))
    assert fired() == [first + timedelta(seconds=s) for s in range(7)]
    assert all(f.turn_id for f in ScheduleFiring.objects.all())
    assert Schedule.objects.get(pk=row.pk).last_fired_at == first + timedelta(seconds=6)


def test_interval_firings_older_than_the_grace_follow_the_missed_policy(agent):
    skip = schedule(agent, every=10, task="Tick", key="skip")
    catch_up = schedule(agent, every=10, task="Tick", key="catch-up", missed="catch_up")
    first = _aligned_after(max(skip.created_at, catch_up.created_at), 10)
    late = first + timedelta(hours=1, seconds=1)  # beat was down an hour; grace is a minute
    fire_schedules(late)
    on_time = [late - timedelta(seconds=1) - timedelta(seconds=s) for s in range(50, -1, -10)]
    assert [f.fired_for for f in ScheduleFiring.objects.filter(schedule=skip)
            .order_by("fired_for")] == on_time
    assert [f.fired_for for f in ScheduleFiring.objects.filter(schedule=catch_up)
            .order_by("fired_for")] == [on_time[0] - timedelta(seconds=10), *on_time]
    assert fire_schedules(late + timedelta(seconds=1)) == []


def test_a_schedule_can_switch_between_cron_and_every(agent):
    row = schedule(agent, cron="0 9 * * *", task="Digest", key="switch")
    again = schedule(agent, every=30, task="Digest", key="switch")
    assert again.pk == row.pk
    assert (Schedule.objects.get(pk=row.pk).cron, Schedule.objects.get(pk=row.pk).every) == (
        "", 30)
    schedule(agent, cron="0 9 * * *", task="Digest", key="switch")
    assert Schedule.objects.get(pk=row.pk).every is None


@pytest.mark.parametrize(("kwargs", "words"), [
    ({}, "exactly one of cron= or every="),
    ({"cron": "0 9 * * *", "every": 5}, "exactly one of cron= or every="),
    ({"every": 0}, "at least 1"),
    ({"every": -3}, "at least 1"),
    ({"every": 1.5}, "whole number of seconds"),
    ({"every": True}, "whole number of seconds"),
    ({"every": "5"}, "whole number of seconds"),
])
def test_bad_every_arguments_are_refused(agent, kwargs, words):
    with pytest.raises(InputError, match=words):
        schedule(agent, task="Tick", key="bad", **kwargs)
    assert Schedule.objects.count() == 0


def test_the_admin_form_takes_every_or_cron_but_not_both_nor_neither(agent, rf, admin_user):
    admin = ScheduleAdmin(Schedule, AdminSite())
    request = rf.post("/")
    request.user = admin_user
    form_class = admin.get_form(request)
    assert "every" in form_class.base_fields
    data = {"key": "tick", "agent_name": "ticker", "cron": "", "every": "5",
            "task": "Tick", "missed": "skip", "enabled": "on", "principal": "null"}
    assert form_class(data=data).is_valid()
    for changes in ({"every": ""}, {"cron": "0 9 * * *"}):
        form = form_class(data={**data, **changes})
        assert not form.is_valid()
        assert "exactly one of" in str(form.errors)
    form = form_class(data={**data, "every": "0"})
    assert not form.is_valid() and "every" in form.errors


@pytest.mark.parametrize(("cron", "every"), [("", None), ("0 9 * * *", 5)])
def test_the_database_refuses_a_schedule_with_both_or_neither(cron, every):
    with pytest.raises(IntegrityError), transaction.atomic():
        Schedule.objects.create(key="raw", agent_name="ticker", task="Tick", cron=cron,
                                every=every)
