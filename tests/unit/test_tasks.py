"""turnkit_django.tasks (what autodiscover finds), its alias turnkit_django.celery, and the beat
schedule, which reads TURNKIT only when beat uses it."""

from __future__ import annotations

import pickle
from datetime import timedelta

import pytest
from celery import Celery
from celery.beat import Scheduler
from django.test import override_settings

import turnkit_django.celery as alias
import turnkit_django.tasks as tasks
from turnkit_django import ConfigurationError


def test_the_alias_holds_the_same_objects():
    for name in ("run_turn", "maintain", "reconcile", "cancel_sweep", "enqueue_turn",
                 "beat_schedule", "fire_schedules"):
        assert getattr(alias, name) is getattr(tasks, name), name
    assert tasks.run_turn.name == "turnkit.run_turn"
    assert tasks.run_turn.acks_late and tasks.run_turn.reject_on_worker_lost


def test_beat_schedule_reads_no_setting_until_used():
    with override_settings(TURNKIT=["not", "a", "dict"]):
        entries = tasks.beat_schedule()  # at import time of a project's celery.py: no error
        with pytest.raises(ConfigurationError, match="must be a dict"):
            entries["turnkit-reconcile"]["schedule"].run_every  # noqa: B018
    with override_settings(TURNKIT={"RECONCILE_INTERVAL": "two"}):
        with pytest.raises(ConfigurationError, match=r"RECONCILE_INTERVAL.*'two'"):
            dict(entries["turnkit-reconcile"]["options"])


def test_the_entries_follow_the_settings_when_used():
    entries = tasks.beat_schedule()
    assert {e["task"] for e in entries.values()} == {"turnkit.reconcile", "turnkit.cancel_sweep",
                                                     "turnkit.schedules"}
    entry = entries["turnkit-reconcile"]
    assert entry["schedule"].run_every == timedelta(seconds=15)
    with override_settings(TURNKIT={"RECONCILE_INTERVAL": 4, "LEASE": 30, "QUEUE": "agents"}):
        assert entry["schedule"].run_every == timedelta(seconds=4)
        assert dict(entry["options"]) == {"queue": "agents", "expires": 4.0}


def test_an_entry_sent_to_another_queue_keeps_the_other_options_lazy():
    entries = tasks.beat_schedule()
    options = entries["turnkit-reconcile"]["options"]
    options["queue"] = "turnkit-maintenance"  # docs/howto/celery.md: a queue for maintenance
    with override_settings(TURNKIT={"RECONCILE_INTERVAL": 3, "LEASE": 30}):
        assert options.copy() == {"queue": "turnkit-maintenance", "expires": 3.0}
    del options["queue"]
    assert dict(options) == {"queue": "turnkit", "expires": 15.0}
    with pytest.raises(KeyError):
        del options["expires"]


def test_beat_sends_the_entries_to_the_queue_and_keeps_them_in_its_shelve():
    app = Celery("beat_probe", set_as_current=False)
    app.conf.update(broker_url="memory://", beat_schedule=tasks.beat_schedule())
    try:
        scheduler = Scheduler(app, lazy=False)
        entry = scheduler.schedule["turnkit-reconcile"]
        due, next_check = entry.is_due()  # a new entry counts from now: due in one interval
        assert not due and 14 < next_check <= 15
        with override_settings(TURNKIT={"QUEUE": "beat_probe_q", "RECONCILE_INTERVAL": 5}):
            scheduler.apply_async(entry)
            with app.connection_for_read() as connection:
                queue = connection.SimpleQueue("beat_probe_q")
                message = queue.get(timeout=5)
                queue.close()
        assert message.headers["task"] == "turnkit.reconcile"
        assert message.headers["expires"]  # an ISO timestamp: now + the interval
        message.ack()
        copy = pickle.loads(pickle.dumps(entry))  # noqa: S301 - beat's shelve pickles entries
        assert copy.schedule == entry.schedule and dict(copy.options) == dict(entry.options)
    finally:
        app.close()
