"""What celery beat makes of a project's beat schedule, read as beat reads it (check W001)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

try:  # optional SDK: without it there is no beat to read a schedule
    from celery.beat import ScheduleEntry
except ImportError:  # pragma: no cover - celery is an optional extra
    ScheduleEntry = Mapping  # type: ignore[assignment,misc]

RECONCILE = "turnkit.reconcile"


def beat_problem(schedule: Any) -> str | None:
    """Why beat would not run ``turnkit.reconcile`` on ``schedule`` (``app.conf.beat_schedule``),
    or None. Beat takes a dict of name -> entry, each a dict or a ``ScheduleEntry``; anything
    else stops beat from starting at all, so the schedule's other entries never run either."""
    schedule = schedule or {}
    if not isinstance(schedule, Mapping):
        return f"is a {type(schedule).__name__}, not a dict of entries, so beat cannot start"
    for name, entry in schedule.items():
        if not isinstance(entry, Mapping | ScheduleEntry):
            return (f"entry {name!r} is a {type(entry).__name__}, not a dict, so beat cannot "
                    "start")
    tasks = [e.get("task") if isinstance(e, Mapping) else e.task for e in schedule.values()]
    return None if RECONCILE in tasks else f"has no {RECONCILE} entry"


__all__ = ["RECONCILE", "beat_problem"]
