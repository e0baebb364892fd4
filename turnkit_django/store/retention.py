"""Retention: deleting finished history (conversations with everything they hold).

A pruned root conversation goes with the conversations below it (every level), their turns,
messages, tool executions, waits and the events of the trees rooted there: nothing else. A tree
can reach into other conversations: a message its model sent (``send_message``, a launched
child's callback) wakes a reply turn in the destination inside the sender's tree. That turn is
the destination's history, so it is *detached* before the delete: it becomes the root of a run
of its own (its descendants and its events move with it), and the destination's transcript
stays whole. A conversation is not pruned while anything that depends on it is in flight: an
active turn in its subtree or in one of its trees elsewhere, an active turn waiting for one of
its turns, or an undelivered message from or to it.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from datetime import datetime

from django.db import transaction
from django.db.models import F, Q

from ..base.states import ACTIVE_TURN_STATUSES
from ..models import Conversation, Delivery, Event, ToolExecution, Turn, Wait

#: Where a pass stopped: the (updated_at, id) of the last candidate it looked at.
Cursor = tuple[datetime, str]

_ACTIVE = [str(s) for s in ACTIVE_TURN_STATUSES]


def delete_prunable(before: datetime, limit: int, after: Cursor | None = None, *,
                    dry_run: bool = False) -> tuple[int, Cursor | None]:
    """Delete the prunable ones among the next ``limit`` candidate root conversations (idle
    since ``before``, oldest first, after ``after``), with everything below them; detach their
    trees' turns in other conversations first. Return how many went (or would go, with
    ``dry_run``) and where to continue (None: no candidate is left).

    Selected, checked and deleted in one transaction. On PostgreSQL the candidates' rows and
    their trees' roots are locked first (rows another transaction holds are skipped: that
    conversation is in use), so a turn, message or delivery written meanwhile either is seen by
    the checks or waits for this transaction and then finds its conversation gone.
    """
    with transaction.atomic():
        candidates = Conversation.objects.prunable(before).order_by("updated_at", "pk")
        if after is not None:
            candidates = candidates.filter(Q(updated_at__gt=after[0])
                                           | Q(updated_at=after[0], pk__gt=after[1]))
        if not dry_run:
            candidates = candidates.select_for_update(skip_locked=True)
        rows = list(candidates.values_list("updated_at", "pk")[:limit])
        cursor = rows[-1] if len(rows) == limit else None
        owner = _subtrees(pk for _, pk in rows)
        if not dry_run:
            _lock_roots(owner)
        blocked = _blocked(owner)
        owner = {conv: root for conv, root in owner.items() if root not in blocked}
        roots = set(owner.values())
        if roots and not dry_run:
            _detach(set(owner))
            Conversation.objects.filter(pk__in=roots).delete()
    return len(roots), cursor


def _subtrees(root_ids: Iterable[str]) -> dict[str, str]:
    """Each conversation below (and including) the given roots, mapped to its root."""
    owner = {pk: pk for pk in root_ids}
    level = list(owner)
    while level:
        rows = list(Conversation.objects.filter(parent_conversation_id__in=level).order_by()
                    .values_list("pk", "parent_conversation_id"))
        level = [pk for pk, _ in rows if pk not in owner]
        owner.update((pk, owner[parent]) for pk, parent in rows if pk not in owner)
    return owner


def _lock_roots(owner: dict[str, str]) -> None:
    """Lock the root turns of the trees rooted in these conversations (FOR UPDATE: a turn or
    event joining such a tree waits, then finds it gone); a root another transaction holds
    marks its conversation's root as in use (removed from ``owner``)."""
    roots = Turn.objects.order_by().filter(conversation_id__in=list(owner), root_turn_id=F("pk"))
    wanted = dict(roots.values_list("pk", "conversation_id"))
    got = set(roots.select_for_update(skip_locked=True).values_list("pk", flat=True))
    busy = {owner[conv] for pk, conv in wanted.items() if pk not in got}
    for conv in [c for c, r in owner.items() if r in busy]:
        del owner[conv]


def _blocked(owner: dict[str, str]) -> set[str]:
    """The roots that something in flight depends on (see the module docstring)."""
    if not owner:
        return set()
    ids = list(owner)
    found: set[str] = set()
    # Sets, not lists: no default ordering (the first check reads turnkit_turn_active_conv).
    active = Turn.objects.filter(status__in=_ACTIVE).order_by()
    found.update(active.filter(conversation_id__in=ids)
                 .values_list("conversation_id", flat=True))
    found.update(active.filter(root_turn__conversation_id__in=ids)
                 .values_list("root_turn__conversation_id", flat=True))
    found.update(Wait.objects.filter(target__conversation_id__in=ids,
                                     waiter__status__in=_ACTIVE).order_by()
                 .values_list("target__conversation_id", flat=True))
    pending = Delivery.objects.pending().order_by()
    found.update(pending.filter(source_conversation_id__in=ids)
                 .values_list("source_conversation_id", flat=True))
    found.update(pending.filter(destination_conversation_id__in=ids)
                 .values_list("destination_conversation_id", flat=True))
    return {owner[conv] for conv in found if conv in owner}


def _detach(conversations: Collection[str]) -> None:
    """Keep the turns of other conversations that belong to trees rooted in (or hang from turns
    of) ``conversations``: each part of such a tree outside them becomes a run of its own, its
    top turn the root, its descendants and their events moved with it. All of them are
    finished (:func:`_blocked`)."""
    ids = list(conversations)
    # Each link read on its own, by its index: one query OR-ing the three across joins made
    # PostgreSQL hash-join whole tables.
    turns = list(Turn.objects.order_by().filter(conversation_id__in=ids)
                 .values_list("pk", flat=True))
    executions = list(ToolExecution.objects.order_by().filter(turn_id__in=turns)
                      .values_list("pk", flat=True))
    outside = Turn.objects.order_by().exclude(conversation_id__in=ids)
    links = [Q(root_turn_id__in=turns), Q(parent_turn_id__in=turns)]
    if executions:
        links.append(Q(parent_tool_execution_id__in=executions))
    rows = {row["pk"]: row for link in (links if turns else []) for row in outside.filter(
        link).values("pk", "root_turn_id", "depth", "root_turn__conversation_id",
                     "parent_turn_id", "parent_turn__conversation_id",
                     "parent_tool_execution__turn__conversation_id")}
    if not rows:
        return
    cut = [pk for pk, row in rows.items()
           if row["parent_turn__conversation_id"] in conversations
           or row["parent_tool_execution__turn__conversation_id"] in conversations]
    Turn.objects.filter(pk__in=cut).update(parent_turn=None, parent_tool_execution=None)
    parents = {pk: None if pk in cut else row["parent_turn_id"] for pk, row in rows.items()}
    groups: dict[str, list[str]] = {}
    for pk, row in rows.items():
        if row["root_turn__conversation_id"] in conversations:
            groups.setdefault(_top(pk, parents), []).append(pk)
    for top, members in groups.items():
        old_roots = {rows[pk]["root_turn_id"] for pk in members}
        Turn.objects.filter(pk__in=members).update(root_turn_id=top,
                                                   depth=F("depth") - rows[top]["depth"])
        Event.objects.filter(root_turn_id__in=old_roots, turn_id__in=members).update(
            root_turn_id=top)


def _top(pk: str, parents: dict[str, str | None]) -> str:
    """The highest turn above ``pk`` (itself included) among the detached ones."""
    while (parent := parents[pk]) is not None and parent in parents:
        pk = parent
    return pk


__all__ = ["Cursor", "delete_prunable"]
