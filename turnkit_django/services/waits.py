"""Application waits: a turn that runs only after other turns have finished.

``run.wait_for(other)`` before the turn starts; the rules live with the wait graph in
:mod:`turnkit_django.store.waits`, which also gives the turn the targets' results as input when
it is released.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from django.db import transaction

from ..authorization import authorize
from ..events import emit
from ..exceptions import InvalidTransition, WaitError
from ..models import Turn, Wait
from ..serialization import unstorable
from ..states import ACTIVE_TURN_STATUSES, TurnStatus
from ..store import apply_transition, lock_tree
from ..store.waits import add_edges, join, unmet

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
    with transaction.atomic():
        lock_tree(waiter.root_turn_id)
        row = Turn.objects.get(pk=waiter.pk)
        # A turn that has started (running, paused, or back to pending or waiting) is refused
        # as started; only a finished one is an invalid transition.
        if row.started_at is not None and row.status in ACTIVE_TURN_STATUSES:
            raise WaitError(f"turn {row.pk!r} has already started; attach waits before it runs")
        if row.status not in (TurnStatus.PENDING, TurnStatus.WAITING):
            raise InvalidTransition(row.pk, row.status, "wait_for")
        if (row.state or {}).get("joined_message_id") and set(ids) - set(
                Wait.objects.filter(waiter_id=row.pk).values_list("target_id", flat=True)):
            # Given once, in one message (store.waits.join): a later target's result would
            # never reach the turn's input.
            raise WaitError(f"turn {row.pk!r} has already been given the results it waited "
                            "for; add waits before they are given")
        found = {t.pk: t for t in Turn.objects.filter(pk__in=ids)}
        missing = [pk for pk in ids if pk not in found]
        if missing:
            raise WaitError(f"no turn {missing[0]!r} to wait for")
        add_edges(row, [found[pk] for pk in ids])
        blocked = any(found[pk].status in ACTIVE_TURN_STATUSES for pk in ids)
        if row.status == TurnStatus.PENDING and row.submitted_at is not None:
            if blocked:
                apply_transition(row.pk, "wait")
                row.status = TurnStatus.WAITING
                emit("turn.waiting", turn_id=row.pk, conversation_id=row.conversation_id,
                     targets=list(ids))
            elif not unmet(row.pk):
                # Nothing to wait for, so no release will give the results: give them now,
                # before a worker claims the turn (submit does the same, submit_status).
                join(row)
    return row


def join_for_inline(turn: Turn) -> None:
    """Before inline execution: refuse unmet waits, give met ones their results."""
    if not turn.waits.exists():
        return
    with transaction.atomic():
        lock_tree(turn.root_turn_id)
        row = Turn.objects.get(pk=turn.pk)
        if unmet(row.pk):
            raise WaitError(f"turn {row.pk!r} waits for turns that have not finished; submit it "
                            "so it runs when they finish")
        if row.started_at is None:
            join(row)
    turn.state = row.state


__all__ = ["add_wait", "join_for_inline"]
