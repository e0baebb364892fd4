"""Application waits: a turn that runs only after other turns have finished.

``run.wait_for(other)`` before the turn starts; the rules live with the wait graph in
:mod:`turnkit_django.store.waits`, which also gives the turn the targets' results as input when
it is released.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ..base.serialization import unstorable
from ..exceptions import WaitError
from ..models import Turn
from ..runtime.authorization import authorize
from ..store import attach_waits, join_inline

_UNSET: Any = object()


def _target_ids(targets: Iterable[Any]) -> list[str]:
    ids: list[str] = []
    for target in targets:
        row = getattr(target, "row", target)
        pk = row.pk if isinstance(row, Turn) else row
        if not isinstance(pk, str) or not pk:
            raise WaitError(f"cannot wait for {target!r}: give turns, runs or turn ids")
        problem = unstorable(pk)
        if problem is not None:  # PostgreSQL would refuse the lookup itself (DataError)
            raise WaitError(f"no turn {pk!r} to wait for: the id {problem}")
        if pk not in ids:
            ids.append(pk)
    if not ids:
        raise WaitError("wait_for needs at least one turn to wait for")
    return ids


def add_wait(waiter: Turn, targets: Sequence[Any], *, principal: Any = _UNSET) -> Turn:
    """Make ``waiter`` run only after ``targets`` finish (the application form of wait_for).

    Only a turn that has not started may wait (pending or already waiting). A submitted pending
    waiter with unfinished targets becomes ``waiting``; an unsubmitted one keeps ``pending`` and
    submit decides. Idempotent per (waiter, target). The ``wait`` action is authorized for
    ``principal`` (default: the waiter's principal) first.
    """
    ids = _target_ids(targets)
    if principal is _UNSET:
        principal = waiter.principal
    owners = dict(Turn.objects.filter(pk__in=ids).values_list("pk", "principal"))
    authorize("wait", principal=principal, turn_id=waiter.pk, target_ids=list(ids),
              turn_principal=waiter.principal, target_principals=[owners.get(pk) for pk in ids])
    return attach_waits(waiter, ids)


def join_for_inline(turn: Turn) -> None:
    """Before inline execution: refuse unmet waits, give met ones their results."""
    if not turn.waits.exists():
        return
    turn.state = join_inline(turn).state


__all__ = ["add_wait", "join_for_inline"]
