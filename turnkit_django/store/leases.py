"""A turn's lease lives while the turn can run: the transition that ends it deletes it.

Reconcile's expired-lease query (``TurnQuerySet.lease_expired``) joins the lease table, so a
lease left behind by every finished turn would make it grow with history. Every write of a
transition whose target is terminal (completed, failed, cancelled, stale) deletes the turn's
lease with it: in the same statement on PostgreSQL's fast paths (:func:`drop_cte`), in the same
transaction otherwise (:func:`drop`). Migration 0020 deletes the leases finished turns kept
before this rule.
"""

from __future__ import annotations

from ..base.states import TERMINAL_TURN_STATUSES, TRANSITIONS
from ..models import Lease
from . import sql

#: The transitions that end a turn (their target is a terminal status).
ENDING = frozenset(name for name, t in TRANSITIONS.items() if t.target in TERMINAL_TURN_STATUSES)


def ends(transition: str | None) -> bool:
    """Whether ``transition`` ends the turn (so its lease goes with it)."""
    return transition in ENDING


def drop_cte(name: str, turn_id: str, source: str, params: list[object]) -> str:
    """CTE ``name``: delete ``turn_id``'s lease if CTE ``source`` wrote a row."""
    params.append(turn_id)
    column = sql.quote(sql.field_of(Lease, "turn").column)
    return (f"{name} AS (DELETE FROM {sql.table(Lease)} WHERE {column} = %s "  # noqa: S608
            f"AND EXISTS (SELECT FROM {source}))")


def drop(turn_id: str) -> None:
    """Delete ``turn_id``'s lease (the caller's transaction ended the turn)."""
    Lease.objects.filter(turn_id=turn_id).delete()  # nothing refers to a lease: one DELETE


__all__ = ["ENDING", "drop", "drop_cte", "ends"]
