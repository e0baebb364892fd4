"""Interval schedules (``schedule(agent, every=seconds, ...)``): their firing times.

A schedule every ``n`` seconds fires at the multiples of ``n`` seconds since the Unix epoch
(UTC), so every process computes the same firing times from the database clock, whatever its
own clock or time zone. Computed with exact ``timedelta`` arithmetic (no float rounding).
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from ..exceptions import InputError

EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def every_seconds(value: object) -> int:
    """``value`` as the period of an interval schedule; InputError saying what to pass."""
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise InputError(f"schedule(every=...) takes a whole number of seconds, such as "
                         f"every=30; got {value!r}.")
    if value < 1:
        raise InputError(f"schedule(every=...) must be at least 1 second; got {value!r}.")
    return value


def _index(every: int, moment: datetime) -> int:
    """The number of whole periods from the epoch to ``moment`` (floor)."""
    return (moment - EPOCH) // timedelta(seconds=every)


def _at(every: int, index: int) -> datetime:
    return EPOCH + timedelta(seconds=every * index)


def latest_interval_firing(every: int, after: datetime, now: datetime) -> datetime | None:
    """The latest firing in ``(after, now]``, or None when there is none."""
    firing = _at(every, _index(every, now))
    return firing if firing > after else None


def interval_firings(every: int, after: datetime, now: datetime) -> list[datetime]:
    """Every firing in ``(after, now]``, oldest first."""
    return [_at(every, index)
            for index in range(_index(every, after) + 1, _index(every, now) + 1)]


__all__ = ["EPOCH", "every_seconds", "interval_firings", "latest_interval_firing"]
