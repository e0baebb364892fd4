"""Schedule rows: saved by key, and each firing recorded once (``turnkit_schedule_firing_once``).

A firing is claimed by inserting its (schedule, firing time) row in the caller's transaction,
the one that creates its run: a second tick racing for the same firing waits on the unique
index until the first commits, then finds it taken and starts nothing (its savepoint rolled
back), on PostgreSQL and SQLite alike. :func:`start_firing` is that transaction: the claim, the
run (created by the caller's ``create``), its link and ``last_fired_at``.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime

from django.db import IntegrityError, transaction
from django.db.models import Q

from ..base.serialization import JsonValue
from ..models import Schedule, ScheduleFiring, Turn


def save_schedule(key: str, *, agent_name: str, cron: str, every: int | None, task: str,
                  missed: str, principal: JsonValue, enabled: bool) -> Schedule:
    """Create the schedule ``key`` or update it in place (its firings are kept)."""
    fields = {"agent_name": agent_name, "cron": cron, "every": every, "task": task,
              "missed": missed,
              "principal": principal, "enabled": enabled}
    with transaction.atomic():
        row, _ = Schedule.objects.select_for_update().update_or_create(key=key, defaults=fields)
    return row


def save_schedule_row(row: Schedule) -> None:
    """Write a schedule an operator edited in the admin."""
    row.save()


def delete_schedule_row(row: Schedule) -> None:
    row.delete()


def enabled_schedules() -> list[Schedule]:
    return list(Schedule.objects.filter(enabled=True).order_by("key"))


def mark_fired(schedule: Schedule, firing: datetime) -> bool:
    """Move ``last_fired_at`` forward to ``firing`` (never back); False if already there."""
    done = Schedule.objects.filter(Q(last_fired_at__isnull=True) | Q(last_fired_at__lt=firing),
                                   pk=schedule.pk).update(last_fired_at=firing)
    schedule.last_fired_at = max(firing, schedule.last_fired_at or firing)
    return bool(done)


def claim_firing(schedule: Schedule, firing: datetime) -> ScheduleFiring | None:
    """Record the firing of ``schedule`` at ``firing`` in the current transaction, or None when
    it is recorded already (by this tick earlier or by another process)."""
    if ScheduleFiring.objects.filter(schedule_id=schedule.pk, fired_for=firing).exists():
        return None
    try:
        with transaction.atomic():
            return ScheduleFiring.objects.create(schedule_id=schedule.pk, fired_for=firing)
    except IntegrityError:  # another tick committed it first
        return None


def link_firing(firing: ScheduleFiring, turn: Turn) -> None:
    ScheduleFiring.objects.filter(pk=firing.pk).update(turn=turn)
    firing.turn = turn


@dataclass(frozen=True)
class Started:
    """The run a firing started (its doorbell rings once the transaction commits)."""

    turn: Turn


@dataclass(frozen=True)
class Taken:
    """Another tick (or this one earlier) recorded the firing: no run was started."""


TAKEN = Taken()


def start_firing(schedule: Schedule, firing: datetime,
                 create: Callable[[], Turn]) -> Started | Taken:
    """In one transaction: claim the firing of ``schedule`` at ``firing``, start its run
    (``create()``, the caller's new turn) and link it, and move ``last_fired_at`` to it; a
    firing already claimed only moves ``last_fired_at``."""
    with transaction.atomic():
        record = claim_firing(schedule, firing)
        if record is None:  # another tick started it
            mark_fired(schedule, firing)
            return TAKEN
        turn = create()
        link_firing(record, turn)
        mark_fired(schedule, firing)
    return Started(turn)


__all__ = ["TAKEN", "Started", "Taken", "claim_firing", "delete_schedule_row",
           "enabled_schedules", "link_firing", "mark_fired", "save_schedule",
           "save_schedule_row", "start_firing"]
