"""Application waits (``run.wait_for``): each change one transaction under the tree lock.

:func:`attach_waits` adds a not yet started turn's wait edges (the rules are
:mod:`.waits`'), and :func:`join_inline` gives an inline turn the results it waited for before
it runs. The caller (``services.waits``) checks the targets and asks the policy first.
"""

from __future__ import annotations

from collections.abc import Sequence

from django.db import transaction

from ..base.states import ACTIVE_TURN_STATUSES, TurnStatus
from ..events import emit
from ..exceptions import InvalidTransition, WaitError
from ..models import Turn, Wait
from .locks import lock_tree
from .turns import apply_transition
from .waits import add_edges, join, unmet


def attach_waits(waiter: Turn, ids: Sequence[str]) -> Turn:
    """Make ``waiter`` wait for the turns ``ids``; return its row as changed (``waiting`` when
    it is submitted and a target is unfinished). WaitError or InvalidTransition, changing
    nothing, when it has started or finished, or a rule refuses an edge."""
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


def join_inline(turn: Turn) -> Turn:
    """Before an inline turn runs: refuse unmet waits (WaitError), give met ones their results;
    return its row as changed."""
    with transaction.atomic():
        lock_tree(turn.root_turn_id)
        row = Turn.objects.get(pk=turn.pk)
        if unmet(row.pk):
            raise WaitError(f"turn {row.pk!r} waits for turns that have not finished; submit it "
                            "so it runs when they finish")
        if row.started_at is None:
            join(row)
    return row


__all__ = ["attach_waits", "join_inline"]
