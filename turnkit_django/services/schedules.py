"""The schedule tick: start one run for each due firing of each enabled schedule.

Beat sends ``turnkit.schedules`` every ``RECONCILE_INTERVAL`` seconds; the tick reads the
database clock, so beats and workers on hosts with skewed clocks agree on what is due.

For each schedule the tick considers its firings after the later of its creation and its
``last_fired_at``, up to now: cron firings (:mod:`turnkit_django.base.cron`) or interval ones
(:mod:`turnkit_django.base.intervals`). Every firing the tick sees within the grace (``grace()``:
twice ``RECONCILE_INTERVAL``, at least a minute) of its time is on time and starts a run, oldest
first, however many a late tick finds (an every-second schedule misses none while beat runs,
whatever beat's period). Older ones were missed (beat, or every worker, was down when they came):
with ``missed="skip"`` none of them start; with ``missed="catch_up"`` the most recent missed
firing starts once (the earlier ones never). Either way ``last_fired_at`` moves past them, so
each is considered once.

A run is started in the transaction that records its firing (unique per schedule and firing
time), so ticks racing, repeated, or in several beats never start two runs for one firing.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from ..agents import AgentDefinition, get_agent
from ..base import cron, intervals
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from ..messages import TextPart
from ..models import Schedule
from ..runtime.creation import new_turn
from ..store import database_now
from ..store.schedules import Started, enabled_schedules, mark_fired, start_firing

logger = logging.getLogger("turnkit_django.schedules")


def grace() -> timedelta:
    """How late a tick may see a firing for it to count as on time, not missed."""
    return max(timedelta(minutes=1), 2 * timedelta(seconds=turnkit_settings.RECONCILE_INTERVAL))


def _firings(schedule: Schedule, after: datetime, now: datetime) -> list[datetime]:
    """The firings of ``schedule`` in ``(after, now]``, oldest first."""
    if schedule.every is not None:
        return intervals.interval_firings(schedule.every, after, now)
    found: list[datetime] = []
    while (firing := cron.next_firing(schedule.cron, after)) <= now:
        found.append(firing)
        after = firing
    return found


def _latest(schedule: Schedule, after: datetime, now: datetime) -> datetime | None:
    if schedule.every is not None:
        return intervals.latest_interval_firing(schedule.every, after, now)
    return cron.latest_firing(schedule.cron, after, now)


def due_firings(schedule: Schedule, now: datetime) -> list[tuple[datetime, bool]]:
    """The firings of ``schedule`` to consider at ``now``, oldest first, each with whether it
    starts a run: at most one missed firing (the most recent), then every on-time one."""
    after = max(schedule.created_at, schedule.last_fired_at or schedule.created_at)
    cutoff = now - grace()
    due = []
    if after < cutoff and (missed := _latest(schedule, after, cutoff)) is not None:
        due.append((missed, schedule.missed == "catch_up"))
    due.extend((firing, True) for firing in _firings(schedule, max(after, cutoff), now))
    return due


def fire_schedules(now: datetime | None = None) -> list[str]:
    """One tick at ``now`` (default: the database clock); returns the ids of the runs started."""
    now = now or database_now()
    started = []
    for schedule in enabled_schedules():
        try:
            started.extend(_fire(schedule, now))
        except Exception:  # one broken schedule does not stop the others
            logger.exception("schedule %r could not fire", schedule.key)
    return started


def _fire(schedule: Schedule, now: datetime) -> list[str]:
    started = []
    agent: AgentDefinition | None = None
    for firing, start in due_firings(schedule, now):
        if not start:
            if mark_fired(schedule, firing):
                logger.info("schedule %r skipped its missed firings up to %s", schedule.key,
                            firing.isoformat())
            continue
        if agent is None:
            try:
                agent = get_agent(schedule.agent_name)
            except ConfigurationError as exc:  # retried at the next tick
                logger.warning("schedule %r cannot fire: %s", schedule.key, exc)
                break
        turn_id = _start(schedule, agent, firing)
        if turn_id:
            started.append(turn_id)
    return started


def _start(schedule: Schedule, agent: AgentDefinition, firing: datetime) -> str | None:
    """Start the run of ``firing``: its id, or None when another tick did."""
    outcome = start_firing(schedule, firing, lambda: new_turn(
        agent, [TextPart(schedule.task)], submit=True, prompt_mode="task",
        principal=schedule.principal,
        metadata={"schedule": schedule.key, "fired_for": firing.isoformat()}))
    if not isinstance(outcome, Started):  # another tick started it
        return None
    turn = outcome.turn
    logger.info("schedule %r started run %s for %s", schedule.key, turn.pk, firing.isoformat())
    return str(turn.pk)


__all__ = ["due_firings", "fire_schedules", "grace"]
