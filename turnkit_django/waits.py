"""Wait edges: a turn that runs only after other turns have finished, and is given their results.

Rules, decided under ONE graph lock so that two opposite waits created at the same moment can
never both commit (a transaction-scoped ``pg_advisory_xact_lock`` on PostgreSQL; on SQLite the
IMMEDIATE transaction mode already serializes writers):

* a turn cannot wait for itself;
* a target must be submitted or finished (an unsubmitted pending turn may never run);
* a turn cannot wait for unfinished work in its own conversation (the lane is serial, so the
  target could only run after the waiter: a deadlock);
* no cycles. Reachability is conservative: a conversation counts as one serial lane, so from a
  target's conversation the search follows the wait edges of EVERY unfinished turn there, and
  reaching the waiter's conversation is a cycle. Finished targets end the search. This can
  refuse an ordering that would in fact resolve; it never accepts one that deadlocks.

Lock order: tree lock, then the graph lock (always last), then the conversation lock. The tool
form of ``wait_for`` (inside a fenced write, which holds the tree lock) follows the same order.

Joined results: an application wait (``run.wait_for(other)`` before the turn starts) gives the
targets' result envelopes to the turn as input before its first model call. When the turn is
released (at submit when every target has already finished, or when maintenance moves it from
``waiting`` to ``pending``) one user message carrying the envelopes in requested order is
appended to the conversation under the conversation lock and owned by the turn (``turn_id``):
the turn's input is its frozen ``context_sequence`` plus its own messages, so the results are
part of its context while later messages of the conversation stay out of it. Its id is kept in
``state["joined_message_id"]`` so the join happens once.
"""

from __future__ import annotations

import json
import zlib
from collections.abc import Iterable, Sequence
from typing import Any

from django.db import connection, transaction

from .authorization import authorize
from .events import emit
from .exceptions import ConfigurationError, InvalidTransition, WaitError
from .messages import TextPart
from .models import Message, Turn, Wait
from .states import ACTIVE_TURN_STATUSES, TERMINAL_TURN_STATUSES, TurnStatus
from .store import NewMessage, insert_messages, lock_tree

#: The advisory lock key of the wait graph (one key for the whole database).
GRAPH_LOCK_KEY = zlib.crc32(b"turnkit.wait_graph")

_ACTIVE = [str(s) for s in ACTIVE_TURN_STATUSES]
_UNSET: Any = object()


def graph_lock() -> None:
    """Take the wait-graph lock until the current transaction ends."""
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(%s)", [GRAPH_LOCK_KEY])
    elif connection.vendor != "sqlite":
        raise ConfigurationError(
            f"wait edges need PostgreSQL or SQLite (IMMEDIATE mode); {connection.vendor!r} "
            "has no lock turnkit can use for the wait graph"
        )


def _target_ids(targets: Iterable[Any]) -> list[str]:
    ids: list[str] = []
    for target in targets:
        row = getattr(target, "row", target)
        pk = row.pk if isinstance(row, Turn) else row
        if not isinstance(pk, str) or not pk:
            raise WaitError(f"cannot wait for {target!r}: give turns, runs or turn ids")
        if pk not in ids:
            ids.append(pk)
    if not ids:
        raise WaitError("wait_for needs at least one turn to wait for")
    return ids


def reaches(start_conversation: str, goal_conversation: str) -> bool:
    """Whether unfinished work in ``start_conversation`` (transitively) waits on the goal's lane."""
    seen: set[str] = set()
    frontier = {start_conversation}
    while frontier:
        if goal_conversation in frontier:
            return True
        seen |= frontier
        following = Wait.objects.filter(
            waiter__conversation_id__in=frontier, waiter__status__in=_ACTIVE,
            target__status__in=_ACTIVE,
        ).values_list("target__conversation_id", flat=True).distinct()
        frontier = set(following) - seen
    return False


def check_edge(waiter: Turn, target: Turn) -> None:
    """Raise WaitError unless ``waiter`` may wait for ``target``. Caller holds the graph lock."""
    if target.pk == waiter.pk:
        raise WaitError(f"turn {waiter.pk!r} cannot wait for itself")
    if target.status in TERMINAL_TURN_STATUSES:
        return
    if target.submitted_at is None:
        raise WaitError(f"turn {target.pk!r} is neither submitted nor finished, so it may never "
                        "run; submit it before waiting for it")
    if target.conversation_id == waiter.conversation_id:
        raise WaitError(f"turn {waiter.pk!r} cannot wait for unfinished turn {target.pk!r} of its "
                        "own conversation: turns of one conversation run one at a time")
    if reaches(target.conversation_id, waiter.conversation_id):
        raise WaitError(f"waiting for turn {target.pk!r} would create a cycle: work in its "
                        f"conversation already waits on conversation {waiter.conversation_id!r}")


def add_wait(waiter: Turn, targets: Sequence[Any], *, principal: Any = _UNSET) -> Turn:
    """Make ``waiter`` run only after ``targets`` finish (the application form of wait_for).

    Only a turn that has not started may wait (pending or already waiting). A submitted pending
    waiter with unfinished targets becomes ``waiting``; an unsubmitted one keeps ``pending`` and
    :func:`~turnkit_django.services.submit` decides. Idempotent per (waiter, target). The
    ``wait`` action is authorized for ``principal`` (default: the waiter's principal) first.
    """
    ids = _target_ids(targets)
    if principal is _UNSET:
        principal = waiter.principal
    owners = dict(Turn.objects.filter(pk__in=ids).values_list("pk", "principal"))
    authorize("wait", principal=principal, turn_id=waiter.pk, target_ids=list(ids),
              turn_principal=waiter.principal, target_principals=[owners.get(pk) for pk in ids])
    with transaction.atomic():
        lock_tree(waiter.root_turn_id)
        graph_lock()
        row = Turn.objects.get(pk=waiter.pk)
        if row.status not in (TurnStatus.PENDING, TurnStatus.WAITING):
            raise InvalidTransition(row.pk, row.status, "wait_for")
        if row.started_at is not None:
            raise WaitError(f"turn {row.pk!r} has already started; attach waits before it runs")
        found = {t.pk: t for t in Turn.objects.filter(pk__in=ids)}
        missing = [pk for pk in ids if pk not in found]
        if missing:
            raise WaitError(f"no turn {missing[0]!r} to wait for")
        for pk in ids:
            check_edge(row, found[pk])
        existing = set(Wait.objects.filter(waiter_id=row.pk).values_list("target_id", flat=True))
        Wait.objects.bulk_create([Wait(waiter_id=row.pk, target_id=pk)
                                  for pk in ids if pk not in existing])
        unmet = any(found[pk].status in ACTIVE_TURN_STATUSES for pk in ids)
        if unmet and row.status == TurnStatus.PENDING and row.submitted_at is not None:
            Turn.objects.filter(pk=row.pk, status=TurnStatus.PENDING).update(
                status=TurnStatus.WAITING)
            row.status = TurnStatus.WAITING
            emit("turn.waiting", turn_id=row.pk, conversation_id=row.conversation_id,
                 targets=list(ids))
    return row


def unmet(turn_id: str) -> bool:
    """Whether a target of ``turn_id`` has not finished yet."""
    return Wait.objects.filter(waiter_id=turn_id, target__status__in=_ACTIVE).exists()


def submit_status(turn: Turn) -> str:
    """The status a turn takes on submit: ``waiting`` with unmet waits, else ``pending``.

    With waits all met, the joined results are given to the turn now. Caller holds the tree lock.
    """
    if not Wait.objects.filter(waiter_id=turn.pk).exists():
        return TurnStatus.PENDING
    if unmet(turn.pk):
        return TurnStatus.WAITING
    join(turn)
    return TurnStatus.PENDING


def on_release(turn: Turn, *, expired: bool = False) -> None:
    """Give a released waiter the joined results, unless it already started (a suspended turn
    resumes through its own tool results) or its deadline passed. Caller holds the tree lock."""
    if not expired and turn.started_at is None:
        join(turn)


def join(turn: Turn) -> Message | None:
    """Append the targets' result envelopes, in requested order, as the turn's input (once)."""
    from .subagents import envelope

    state = dict(turn.state or {})
    if state.get("joined_message_id"):
        return None
    edges = list(Wait.objects.filter(waiter_id=turn.pk).select_related("target").order_by("pk"))
    if not edges:
        return None
    results = [envelope(edge.target) for edge in edges]
    text = ("The turns this turn waited for have finished. Their results, in the order they were "
            "requested:\n" + json.dumps({"results": results}, indent=2, default=str))
    message = insert_messages(turn.conversation_id, [NewMessage(
        "user", [TextPart(text)], turn_id=turn.pk,
        metadata={"source": "wait_for", "targets": [edge.target_id for edge in edges]},
    )])[0]
    state["joined_message_id"] = message.pk
    Turn.objects.filter(pk=turn.pk).update(state=state)
    turn.state = state
    return message


def join_for_inline(turn: Turn) -> None:
    """Before inline execution: refuse unmet waits, give met ones their results."""
    if not Wait.objects.filter(waiter_id=turn.pk).exists():
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


__all__ = [
    "GRAPH_LOCK_KEY",
    "add_wait",
    "check_edge",
    "graph_lock",
    "join",
    "join_for_inline",
    "on_release",
    "reaches",
    "submit_status",
    "unmet",
]
