"""Wait edges: the rules that keep the wait graph acyclic, and giving a waiter its results.

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

Lock order: tree lock, then the graph lock, then the conversation lock.

Joined results: a turn released from an application wait is given the targets' result
envelopes as input before its first model call: one user message, in requested order, owned by
the turn (``turn_id``), so they are part of its context while later messages of the
conversation stay out of it. Its id is kept in the state's ``joined_message_id``: once.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from ..base.states import TERMINAL_TURN_STATUSES, TurnStatus
from ..exceptions import WaitError
from ..messages import TextPart
from ..models import Message, Turn, Wait
from .locks import graph_lock
from .transcript import NewMessage, insert_messages
from .turn_state import TurnState


def reaches(start_conversation: str, goal_conversation: str) -> bool:
    """Whether unfinished work in ``start_conversation`` (transitively) waits on the goal's lane."""
    seen: set[str] = set()
    frontier = {start_conversation}
    while frontier:
        if goal_conversation in frontier:
            return True
        seen |= frontier
        following = (Wait.objects.between_active().filter(waiter__conversation_id__in=frontier)
                     .values_list("target__conversation_id", flat=True).distinct())
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


def add_edges(waiter: Turn, targets: Sequence[Turn]) -> None:
    """Insert wait edges from ``waiter`` (once each) under the graph lock.

    The caller holds the waiter's tree lock; raises WaitError, inserting nothing, when a rule
    refuses one of them.
    """
    graph_lock()
    for target in targets:
        check_edge(waiter, target)
    have = set(Wait.objects.filter(waiter_id=waiter.pk).values_list("target_id", flat=True))
    Wait.objects.bulk_create([Wait(waiter_id=waiter.pk, target_id=target.pk)
                              for target in targets if target.pk not in have])


def unmet(turn_id: str) -> bool:
    """Whether a target of ``turn_id`` has not finished yet."""
    return Wait.objects.filter(waiter_id=turn_id).unmet().exists()


def submit_status(turn: Turn, *, has_waits: bool | None = None) -> TurnStatus:
    """The status a turn takes on submit: ``waiting`` with unmet waits, else ``pending``.

    With waits all met, the joined results are given to the turn now. Caller holds the tree
    lock. ``has_waits``: whether the turn has wait edges, when the caller read it already.
    """
    if has_waits is None:
        has_waits = Wait.objects.filter(waiter_id=turn.pk).exists()
    if not has_waits:
        return TurnStatus.PENDING
    if unmet(turn.pk):
        return TurnStatus.WAITING
    join(turn)
    return TurnStatus.PENDING


def join(turn: Turn) -> Message | None:
    """Append the targets' result envelopes, in requested order, as the turn's input (once)."""
    state = TurnState.from_json(turn.state)
    if state.joined_message_id:
        return None
    edges = list(Wait.objects.filter(waiter_id=turn.pk).select_related("target").order_by("pk"))
    if not edges:
        return None
    results = [edge.target.envelope() for edge in edges]
    text = ("The turns this turn waited for have finished. Their results, in the order they were "
            "requested:\n" + json.dumps({"results": results}, indent=2, default=str))
    message = insert_messages(turn.conversation_id, [NewMessage(
        "user", [TextPart(text)], turn_id=turn.pk,
        metadata={"source": "wait_for", "targets": [edge.target_id for edge in edges]},
    )])[0]
    turn.state = {**(turn.state or {}), "joined_message_id": message.pk}
    Turn.objects.filter(pk=turn.pk).update(state=turn.state)
    return message


__all__ = ["add_edges", "check_edge", "join", "reaches", "submit_status", "unmet"]
