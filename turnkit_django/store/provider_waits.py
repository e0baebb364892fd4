"""Turns waiting for a provider slot, or backing off after a provider's 429, marked on their
lease so operators see them from any process (admin, ``turnkit_stats``, ``turnkit_inspect``).

A wait writes twice, one short statement when it starts and one when the request goes out; a
call that never waits writes nothing. The writes are fenced by the claim (a worker that lost
its turn marks nothing) and a new claim clears the mark a dead worker left.
"""

from __future__ import annotations

from datetime import datetime

from django.db.models import Count, QuerySet
from django.db.models.functions import Now

from ..base.states import TurnStatus
from ..models import Lease
from .claims import Claim


def _mine(claim: Claim) -> QuerySet[Lease]:
    return Lease.objects.filter(turn_id=claim.turn_id, fence=claim.fence)


def wait_started(claim: Claim, on: str) -> None:
    """Mark the claim's turn as waiting on the provider limit ``on``."""
    _mine(claim).update(waiting_on=on[:200], waiting_since=Now())


def wait_ended(claim: Claim) -> None:
    """Clear the claim's mark."""
    _mine(claim).update(waiting_on=None, waiting_since=None)


def waiting() -> QuerySet[Lease]:
    """The leases of running turns waiting for a provider slot now."""
    return Lease.objects.filter(waiting_since__isnull=False, turn__status=TurnStatus.RUNNING)


def waiting_counts() -> dict[str, int]:
    """How many turns wait now, by provider limit."""
    rows = waiting().order_by().values("waiting_on").annotate(n=Count("turn_id"))
    return {row["waiting_on"] or "": row["n"] for row in rows.order_by("waiting_on")}


def waiting_of(turn_id: str) -> tuple[str, datetime] | None:
    """What the running turn ``turn_id`` waits on and since when (None: no wait)."""
    row = waiting().filter(turn_id=turn_id).values_list("waiting_on", "waiting_since").first()
    return None if row is None or row[1] is None else (row[0] or "", row[1])


__all__ = ["wait_ended", "wait_started", "waiting", "waiting_counts", "waiting_of"]
