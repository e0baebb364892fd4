"""Cancellation: stop a turn, and with ``cascade=True`` every descendant, for good.

Under the tree lock, for each turn it changes: running tool executions become ``interrupted``
("outcome unknown") and every open tool call gets a result (transcript repair: a call that
never started, one parked for approval included, is "not executed", and its approval request
becomes ``cancelled``), the status becomes
``cancelled`` with an error record and ``completed_at``, and the fence is incremented, so a worker
still executing the turn (an in-flight model call, a tool still running) can never write again.
Then completion callbacks are created, the affected conversations are woken (buffered deliveries
get their continuation) and the next turn of each lane is dispatched.

Authorization: the ``cancel`` action is asked for the target and for EVERY descendant the call
will change, before any change; one denial raises :class:`AuthorizationError` and writes nothing.
Descendants past the batch are not asked about (nor loaded: the tree walk reads five columns):
the sweep cancels them as part of the cascade the call was authorized for.
A descendant is asked about with ``turn_principal`` set to the TARGET's principal: a continuation
acting for another principal (woken by a delivery from this tree) is cancelled with the tree
that caused it and whose budget it spends.

Bounded work: one call changes at most ``MAINTENANCE_BATCH_SIZE`` descendants, plus those
running on a worker (only the fence move stops them; a claim check does not). Every turn
cancelled by a cascade records ``options["cancel_cascade"] = True``, and :func:`cancel_sweep`
(the beat task ``turnkit.cancel_sweep``) cancels active turns whose parent carries that mark, so a
large cascade finishes over a few passes. Descendants the sweep could not find that way (an
active turn under an already-finished intermediate turn) are always handled by the call itself.

Idempotence: cancelling a finished turn changes nothing, so cancelling twice is a no-op. The one
exception is an escalation: ``cancel(cascade=True)`` on a turn that an earlier plain cancel left
``cancelled`` cancels its still-active descendants (an operator's "Cancel" then "Cancel with
descendants" does what it says).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass, field
from itertools import groupby
from typing import Any

from ..base.serialization import unstorable
from ..conf import turnkit_settings
from ..models import Turn
from ..runtime.authorization import authorize
from ..runtime.deliveries import callback_decision, completion_callback, deliver, hand_on
from ..store import Newcomers, cancel_plan, cancel_tree, sweep_tree
from ..store.input_checks import flag

logger = logging.getLogger("turnkit_django.cancel")


@dataclass
class CancelReport:
    """What one cancel call changed."""

    turn_id: str
    cascade: bool
    status: str = ""
    cancelled: list[str] = field(default_factory=list)
    #: Active descendants left for :func:`cancel_sweep` (the cascade was larger than one batch).
    remaining: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.cancelled)

    def __str__(self) -> str:
        text = f"cancelled {len(self.cancelled)} turn(s)"
        if self.remaining:
            text += f"; {self.remaining} descendant(s) left for cancel_sweep"
        return text


def _authorize(rows: Iterable[Turn], principal: Any, target: Turn, cascade: bool) -> None:
    """Ask ``cancel`` for each turn; a descendant is asked about as the target's.

    A descendant's owner, for a cancel, is the target's principal: a cascade reaches every
    descendant (P7), and one acting for another principal (a continuation a delivery from this
    tree woke in that principal's conversation, and its children) is in the tree because the
    tree caused it, and it spends the tree's budget. Asking about it with its own principal made
    the canceller's whole cascade fail (tenant 1 could not cancel its own run). The target is
    always asked about with its own principal, so nobody cancels another's turn directly.
    """
    for row in rows:
        owner = row.principal if row.pk == target.pk else target.principal
        authorize("cancel", principal=principal, turn_id=row.pk,
                  conversation_id=row.conversation_id, turn_principal=owner,
                  cancelled_turn_id=target.pk, cascade=cascade)


def _deliver_callbacks(callbacks: list[str]) -> None:
    """Deliver the completion callbacks a cancel created (after its commit)."""
    for delivery_id in callbacks:
        try:
            deliver(delivery_id)
        except Exception:
            logger.warning("could not deliver callback %r; maintenance will retry",
                           delivery_id, exc_info=True)


#: How often a cancel reads its plan again when turns appeared after it asked the policy.
ATTEMPTS = 3


def cancel(turn: Turn | str, *, cascade: bool = False, principal: Any = None) -> CancelReport:
    """Cancel a turn (and with ``cascade`` its descendants) for ``principal``.

    The policy is asked for the target (even for a no-op) and every turn that changes, and about
    their completion callbacks, BEFORE the tree lock is taken; under the lock the plan is read
    again, and when a turn appeared meanwhile (a child launched by a racing worker) the call
    asks about it and tries again. Past the last attempt a newcomer is left to the sweep.
    Descendants past the batch are neither loaded nor asked about: the sweep cancels them as
    part of the cascade this call was authorized for.
    """
    flag(cascade, "cancel(): cascade=")
    turn_id = turn.pk if isinstance(turn, Turn) else turn
    batch = max(int(turnkit_settings.MAINTENANCE_BATCH_SIZE), 1)
    # An id no database stores (a NUL, a lone surrogate) names no turn; asked, PostgreSQL and
    # SQLite's driver refuse the query itself.
    root_id = None if isinstance(turn_id, str) and unstorable(turn_id) else (
        Turn.objects.filter(pk=turn_id).values_list("root_turn_id", flat=True).first())
    if root_id is None:
        raise Turn.DoesNotExist(f"turn {turn_id!r} does not exist")
    report = CancelReport(turn_id, cascade)
    asked: dict[str, bool | None] = {}  # turn id: its callback decision
    for attempt in range(1, ATTEMPTS + 1):
        seen = cancel_plan(turn_id, cascade, batch)
        fresh = [row for row in seen.rows if row.pk not in asked]
        _authorize(fresh, principal, seen.target, cascade)
        asked.update((row.pk, callback_decision(row)) for row in fresh)
        outcome = cancel_tree(root_id, turn_id, cascade=cascade, batch=batch,
                              principal=principal, asked=asked, last=attempt == ATTEMPTS,
                              finish=completion_callback, hand_on=hand_on,
                              deliver=_deliver_callbacks)
        if isinstance(outcome, Newcomers):
            continue  # ask about the newcomers without the lock, then read again
        report.status, report.remaining = outcome.status, outcome.remaining
        report.cancelled = [row.pk for row in outcome.changed]
        return report
    return report  # pragma: no cover - the last attempt always returns


def cancel_sweep() -> list[str]:
    """Cancel active turns under cascade-cancelled parents; at most one batch per call.

    Reads only active turns (joined to their parent), oldest first; a turn it cancels is marked
    too, so its own children qualify on the next round of the same call.
    """
    batch = max(int(turnkit_settings.MAINTENANCE_BATCH_SIZE), 1)
    done: list[str] = []
    while len(done) < batch:
        found = list(
            Turn.objects.under_cascade()
            .order_by("created_at", "id").values_list("root_turn_id", "pk")[:batch - len(done)]
        )
        before = len(done)
        for root_id, group in groupby(sorted(found), key=lambda pair: pair[0]):
            done.extend(_sweep_tree(root_id, [pk for _, pk in group]))
        if len(done) == before:
            break
    return done


def _sweep_tree(root_id: str, turn_ids: list[str]) -> list[str]:
    # The policy is asked about the callbacks before the tree lock is taken.
    callbacks = {row.pk: callback_decision(row) for row in Turn.objects.filter(pk__in=turn_ids)}
    changed = sweep_tree(root_id, turn_ids, callbacks=callbacks, finish=completion_callback,
                         hand_on=hand_on, deliver=_deliver_callbacks)
    return [row.pk for row in changed]


__all__ = ["CancelReport", "cancel", "cancel_sweep"]
