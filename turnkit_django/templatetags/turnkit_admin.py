"""Template filters of the turnkit admin: times to the second, costs, durations."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import datetime
from decimal import Decimal

from django import template
from django.utils.translation import gettext

from ..console.formatting import format_cost, format_when, ran_seconds, seconds_between
from ..models import Turn

register = template.Library()


@register.filter
def when(value: datetime | None) -> str:
    """A timestamp to the second in the current time zone; ``—`` when unset."""
    return format_when(value)


@register.filter
def dollars(value: Decimal | None) -> str:
    """A cost in dollars (``unknown`` for None)."""
    return format_cost(value)


@register.filter
def seconds(value: float | None) -> str:
    """A duration in seconds, ``—`` when unknown."""
    return "—" if value is None else f"{value:.2f} s"


@register.simple_tag
def took(start: datetime | None, end: datetime | None) -> str:
    """Seconds from ``start`` to ``end`` as text."""
    return seconds(seconds_between(start, end))


@register.filter
def ran(turn: Turn) -> str:
    """How long ``turn`` ran as text: ``never ran`` for a finished turn that never started
    (cancelled while pending), ``—`` for one not finished yet."""
    value = ran_seconds(turn)
    if value is None and turn.completed_at is not None:
        return gettext("never ran")
    return seconds(value)


@register.filter
def get(mapping: Mapping[str, object], key: str) -> object:
    """``mapping[key]`` (None when missing)."""
    return mapping.get(key)
