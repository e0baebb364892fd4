"""The schedule tick: start one run for each due firing of each enabled schedule.

Beat sends ``turnkit.schedules`` every ``RECONCILE_INTERVAL`` seconds; the tick reads the
database clock, so beats and workers on hosts with skewed clocks agree on what is due.

For each schedule the tick looks for its latest firing after the later of its creation and its
``last_fired_at``, up to now. A firing the tick sees within the grace (``grace()``: twice
``RECONCILE_INTERVAL``, at least a minute) of its time is on time and starts a run. An older
one was missed (beat, or every worker, was down when it came): with ``missed="skip"`` none of
the missed firings start and the schedule waits for its next; with ``missed="catch_up"`` the
most recent missed firing starts once (the earlier ones never). Either way ``last_fired_at``
moves to that firing, so it is considered once.

A run is started in the transaction that records its firing (unique per schedule and firing
time), so ticks racing, repeated, or in several beats never start two runs for one firing.
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta

from django.db import transaction

from .. import cron
from ..agents import get_agent
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from ..messages import TextPart
from ..models import Schedule
from ..runtime.creation import new_turn
from ..store import database_now
from ..store.schedules import claim_firing, enabled_schedules, link_firing, mark_fired

logger = logging.getLogger("turnkit_django.schedules")


def grace() -> timedelta:
    """How late a tick may see a firing for it to count as on time, not missed."""
    return max(timedelta(minutes=1), 2 * timedelta(seconds=turnkit_settings.RECONCILE_INTERVAL))


def due_firing(schedule: Schedule, now: datetime) -> tuple[datetime, bool] | None:
    """The firing of ``schedule`` to consider at ``now`` and whether it starts a run, or None."""
    after = max(schedule.created_at, schedule.last_fired_at or schedule.created_at)
    latest = cron.latest_firing(schedule.cron, after, now)
    if latest is None:
        return None
    on_time = now - latest <= grace()
    return latest, on_time or schedule.missed == "catch_up"


def fire_schedules(now: datetime | None = None) -> list[str]:
    """One tick at ``now`` (default: the database clock); returns the ids of the runs started."""
    now = now or database_now()
    started = []
    for schedule in enabled_schedules():
        try:
            turn_id = _fire(schedule, now)
        except Exception:  # one broken schedule does not stop the others
            logger.exception("schedule %r could not fire", schedule.key)
            continue
        if turn_id:
            started.append(turn_id)
    return started


def _fire(schedule: Schedule, now: datetime) -> str | None:
    due = due_firing(schedule, now)
    if due is None:
        return None
    firing, start = due
    if not start:
        if mark_fired(schedule, firing):
            logger.info("schedule %r skipped its missed firings up to %s", schedule.key,
                        firing.isoformat())
        return None
    try:
        agent = get_agent(schedule.agent_name)
    except ConfigurationError as exc:
        logger.warning("schedule %r cannot fire: %s", schedule.key, exc)
        return None
    with transaction.atomic():
        record = claim_firing(schedule, firing)
        if record is None:  # another tick started it
            mark_fired(schedule, firing)
            return None
        turn = new_turn(agent, [TextPart(schedule.task)], submit=True, prompt_mode="task",
                        principal=schedule.principal,
                        metadata={"schedule": schedule.key, "fired_for": firing.isoformat()})
        link_firing(record, turn)
        mark_fired(schedule, firing)
    logger.info("schedule %r started run %s for %s", schedule.key, turn.pk, firing.isoformat())
    return str(turn.pk)


__all__ = ["due_firing", "fire_schedules", "grace"]
