"""Admission: what keeps a pending turn from being claimed besides its status and its lane.

A background turn whose tenant already runs its ``TENANT_LIMITS`` of turns waits for one of them
to end (:func:`tenant_full`, decided under the tenant lock); a turn below one cancelled with its
descendants waits for the cascade sweep (:func:`cancelled_above`). :mod:`.claims` asks both
before it claims.
"""

from __future__ import annotations

from ..base.states import TurnStatus
from ..conf import turnkit_settings
from ..models import Turn
from .locks import lock_tenant


def tenant_limit(turn: Turn) -> int | None:
    """How many running background turns ``turn``'s tenant may have (``TENANT_LIMITS``), or
    None when no tenant limit applies to it (none set up, no tenant, an inline turn)."""
    limits = turnkit_settings.TENANT_LIMITS
    if limits is None or turn.tenant is None or turn.submitted_at is None:
        return None
    return limits.concurrency


def tenant_full(turn: Turn) -> bool:
    """Whether ``turn``'s tenant already has its ``TENANT_LIMITS`` of running turns: then the
    claim leaves it pending, as a busy lane does, and the end of one of them rings it (see
    ``services.recovery.ring_tenant``). Decided under the tenant lock, held until the claim
    commits, so two claims of one tenant never both count a free place: a count in the
    claim's statement alone would not do, each seeing the running turns as of its own start."""
    limit, tenant = tenant_limit(turn), turn.tenant
    if limit is None or tenant is None:
        return False
    lock_tenant(tenant)
    return Turn.objects.tenant_running(tenant).count() >= limit


def cancelled_above(turn: Turn) -> bool:
    """Whether a turn above ``turn`` (its parent, theirs, ... or, for a root-level task, its
    root) was cancelled with its descendants: a cascade larger than one batch leaves the rest
    to ``cancel_sweep``, and until the sweep reaches it such a turn is never claimed, so
    nothing of it runs after the cancel returned. One indexed read of the tree's cascade marks
    (none, almost always), the tree's parent links only when there is one; a child's claim
    without the lock learns from its root's ledger read whether there is one, and only then
    asks."""
    if turn.is_root:
        return False
    tree = Turn.objects.filter(root_turn_id=turn.root_turn_id)
    marked = set(tree.filter(status=TurnStatus.CANCELLED, options__cancel_cascade=True)
                 .values_list("pk", flat=True))
    if not marked:
        return False
    parents = dict(tree.values_list("pk", "parent_turn_id"))
    root, seen = turn.root_turn_id, set[str]()
    above: str | None = turn.parent_turn_id or root
    while above is not None and above not in seen:
        if above in marked:
            return True
        seen.add(above)
        above = parents.get(above) or (root if above != root else None)
    return False


__all__ = ["cancelled_above", "tenant_full", "tenant_limit"]
