"""How the console writes values: JSON, dollars, seconds and timestamps."""

from __future__ import annotations

import json
from datetime import datetime
from decimal import Decimal
from typing import TYPE_CHECKING

from django.utils import timezone

if TYPE_CHECKING:
    from ..models import Turn


def pretty_json(value: object) -> str:
    """``value`` as indented JSON (non-JSON values by their text)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def format_cost(cost: Decimal | None) -> str:
    """A cost in dollars to the millionth, trailing zeros dropped; ``unknown`` for None."""
    if cost is None:
        return "unknown"
    text = f"{cost:.6f}".rstrip("0")
    whole, _, cents = text.partition(".")
    return f"${whole}.{cents.ljust(2, '0')}"


def seconds_between(start: datetime | None, end: datetime | None) -> float | None:
    """Seconds from ``start`` to ``end``, or None when either is missing."""
    if start is None or end is None:
        return None
    return round((end - start).total_seconds(), 3)


def ran_seconds(turn: Turn) -> float | None:
    """How long a turn ran: its start to its end. None while it has not finished, and for a
    turn that never started (cancelled or refused while pending): it has no duration, whatever
    time passed between its creation and its end."""
    return seconds_between(turn.started_at, turn.completed_at)


def format_when(value: datetime | None) -> str:
    """A timestamp to the second in the current time zone; ``—`` when unset."""
    if value is None:
        return "—"
    if timezone.is_aware(value):
        value = timezone.localtime(value)
    return value.strftime("%Y-%m-%d %H:%M:%S %Z").strip()
