"""Invariants I6 and I7 of the checker (:mod:`.verify`): trees and the wait graph.

I6 - a cascade cancel reaches every descendant
    * no active turn (pending, waiting, paused, running) has an ancestor that was cancelled with
      its descendants (``options["cancel_cascade"]``), once ``cancel_sweep`` has run: a cascade
      larger than one batch, or a child launched while the cancel ran, is finished by the sweep.
      A root-level task of a tree (a continuation that joined it) counts its root as its parent.
I7 - the wait graph is acyclic and waiters are released
    * the edges between active turns form no cycle, and no active turn waits for unfinished work
      of its own conversation (turns of a conversation run one at a time: a deadlock);
    * once maintenance has run, no turn is ``waiting`` when none of its targets is active: every
      waiting turn has at least one unfinished target.

Both read only active turns and the edges and ancestors of active turns, so their cost follows
the work in progress, not the history. With a selection (``verify(conversation_ids=...)``) they
look at the active turns of the selected conversations.
"""

from __future__ import annotations

from collections import defaultdict

from django.db.models import Exists, F, OuterRef, QuerySet

from ..base.states import TurnStatus
from ..models import Conversation, Turn, Wait
from ..models.querysets import TurnQuerySet
from .report import Report

#: The conversations to check (any queryset of them: rows or values), None for all.
Conversations = QuerySet[Conversation, object]


def _active(conversations: Conversations | None) -> TurnQuerySet:
    turns = Turn.objects.active()
    return turns if conversations is None else turns.filter(conversation_id__in=conversations)


def check_cancelled_trees(report: Report, conversations: Conversations | None = None) -> None:
    """I6: walk up from every active child turn (and from every root-level task of a tree, to
    its root); no ancestor may be cascade-cancelled."""
    active = _active(conversations)
    pointer = dict(active.filter(parent_turn__isnull=False).values_list("pk", "parent_turn_id"))
    pointer.update(active.filter(parent_turn__isnull=True).exclude(root_turn_id=F("pk"))
                   .values_list("pk", "root_turn_id"))
    seen: dict[str, tuple[str | None, bool]] = {}
    steps = 0
    while pointer and steps < 1000:  # the bound only guards against corrupted parent links
        steps += 1
        wanted = set(pointer.values()) - seen.keys()
        for pk, parent_id, status, options in Turn.objects.filter(pk__in=wanted).values_list(
                "pk", "parent_turn_id", "status", "options"):
            cascaded = status == TurnStatus.CANCELLED and bool(
                isinstance(options, dict) and options.get("cancel_cascade"))
            seen[pk] = (parent_id, cascaded)
        following: dict[str, str] = {}
        for turn_id, ancestor_id in pointer.items():
            above, cascaded = seen.get(ancestor_id, (None, False))
            if cascaded:
                report.add("I6", turn_id, f"turn is still active under turn {ancestor_id!r}, "
                                          "which was cancelled with its descendants")
            elif above is not None:
                following[turn_id] = above
        pointer = following


def check_wait_graph(report: Report, conversations: Conversations | None = None) -> None:
    """I7: no cycle and no same-lane edge between active turns; no waiter left behind."""
    waiting = _active(conversations).waiting()
    blocked = Wait.objects.filter(waiter_id=OuterRef("pk")).unmet()
    for turn_id in waiting.filter(~Exists(blocked)).values_list("pk", flat=True):
        report.add("I7", turn_id, "turn is waiting but none of its targets is unfinished; "
                                  "maintenance should have released it")
    edges = Wait.objects.filter(waiter__in=_active(conversations)).unmet()
    following: dict[str, list[str]] = defaultdict(list)
    for waiter_id, target_id, waiter_lane, target_lane in edges.order_by("pk").values_list(
            "waiter_id", "target_id", "waiter__conversation_id", "target__conversation_id"):
        following[waiter_id].append(target_id)
        if target_id != waiter_id and waiter_lane == target_lane:
            report.add("I7", waiter_id, f"turn waits for unfinished turn {target_id!r} of its "
                                        "own conversation, which can only run after it")
    for cycle in _cycles(following):
        report.add("I7", cycle[0], "wait cycle: " + " -> ".join([*cycle, cycle[0]]))


def _cycles(following: dict[str, list[str]]) -> list[list[str]]:
    """Cycles of the graph, each reported once, found by an iterative depth-first search."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    found: list[list[str]] = []
    for start in list(following):
        if start in state:
            continue
        path: list[str] = []
        stack: list[tuple[str, int]] = [(start, 0)]
        while stack:
            node, index = stack.pop()
            if index == 0:
                state[node] = 1
                path.append(node)
            targets = following.get(node, [])
            if index < len(targets):
                stack.append((node, index + 1))
                target = targets[index]
                if state.get(target) == 1:
                    found.append(path[path.index(target):])
                elif target not in state:
                    stack.append((target, 0))
            else:
                state[node] = 2
                path.pop()
    return found


def check_graph(report: Report, conversations: Conversations | None = None) -> None:
    """Check I6 and I7, adding violations to ``report``."""
    check_cancelled_trees(report, conversations)
    check_wait_graph(report, conversations)


__all__ = ["check_cancelled_trees", "check_graph", "check_wait_graph"]
