"""Cron expressions of schedules, read by Celery's own parser (``celery.schedules.crontab``).

An expression has the 5 fields of crontab(5): minute, hour, day of month, month, day of week
(0 or ``sun`` is Sunday). Times are evaluated in Django's ``TIME_ZONE``. The resolution is a
minute: a firing is the start of a minute the expression matches.
"""

from __future__ import annotations

from datetime import datetime, timedelta, tzinfo
from zoneinfo import ZoneInfo

from django.conf import settings

from ..exceptions import InputError

try:  # celery is an optional extra; schedules are fired by its beat
    from celery.schedules import ParseException, crontab
except ImportError:  # pragma: no cover - without celery no expression can be read
    crontab = None  # type: ignore[assignment,misc]
    ParseException = ValueError  # type: ignore[assignment,misc]

FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")
EXAMPLE = "'0 9 * * 1-5' (09:00 on weekdays)"
#: The first look back for the latest firing; each further look doubles it.
_FIRST_WINDOW = timedelta(minutes=2)


def cron_problem(expression: object) -> str | None:
    """Why ``expression`` is not a cron expression a schedule can use, or None."""
    if not isinstance(expression, str):
        return f"the cron expression must be a string like {EXAMPLE}; got {expression!r}"
    fields = expression.split()
    if len(fields) != len(FIELDS):
        return (f"the cron expression {expression!r} must have 5 fields (minute hour "
                f"day-of-month month day-of-week), like {EXAMPLE}")
    if crontab is None:  # pragma: no cover
        return "reading cron expressions needs Celery: pip install 'turnkit-django[celery]'"
    for name, field in zip(FIELDS, fields, strict=True):
        try:
            crontab(**{name: field})
        except (ParseException, ValueError, TypeError) as exc:
            label = name.replace("_of_", " of ").replace("_", " ")
            return (f"the cron expression {expression!r} has a bad {label} field {field!r} "
                    f"({exc}); for example {EXAMPLE}")
    return None


def parse(expression: str) -> crontab:
    """The crontab of ``expression``; InputError saying what is wrong."""
    problem = cron_problem(expression)
    if problem:
        raise InputError(problem[0].upper() + problem[1:] + ".")
    return crontab(**dict(zip(FIELDS, expression.split(), strict=True)))


def _zone() -> tzinfo:
    return ZoneInfo(settings.TIME_ZONE or "UTC")


def next_firing(expression: str, after: datetime) -> datetime:
    """The first firing strictly after ``after`` (aware), in UTC."""
    schedule = parse(expression)
    zone = _zone()
    local = after.astimezone(zone).replace(second=0, microsecond=0)
    last, delta, _ = schedule.remaining_delta(local, tz=zone)
    return (last + delta).astimezone(ZoneInfo("UTC"))


def latest_firing(expression: str, after: datetime, now: datetime) -> datetime | None:
    """The latest firing in ``(after, now]``, or None when there is none.

    Looks back from ``now`` over a window that doubles until it holds a firing or reaches
    ``after``, then walks forward through that window: the work is bounded by the firings of
    the last window, not by how long ago ``after`` is."""
    window = _FIRST_WINDOW
    while True:
        start = max(after, now - window)
        firing = next_firing(expression, start)
        if firing <= now:
            break
        if start == after:
            return None
        window *= 2
    while (following := next_firing(expression, firing)) <= now:
        firing = following
    return firing


__all__ = ["EXAMPLE", "cron_problem", "latest_firing", "next_firing", "parse"]
