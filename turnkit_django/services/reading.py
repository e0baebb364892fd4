"""What a reader of a run may see: the tree's conversations it may read, the tree's messages.

A tree spans several conversations, and not all of them belong to the run's principal: a
delivery wakes a continuation in the destination conversation, acting for the destination's
principal, inside the sender's tree (it shares the sender's budget). A read of the run with
``principal=`` therefore asks the ``read_messages`` action once per distinct conversation of the
tree (before any query of the rows it returns, outside any transaction) and returns only the
rows of the conversations it may read; the conversation the handle stands on must be readable,
else :class:`AuthorizationError`. Without a policy every conversation is readable (a trusted
single-tenant application), as before. A stream (:class:`Readable`) asks about a conversation
when it appears and again when a turn acting for another principal joins it.

:func:`tree_messages` is the transcript of the tree: the root's messages as it saw them (its
conversation's history up to its input, and its own), and for every other turn of the tree the
messages it was first to see (the input added since the previous turn of its conversation) and
its own. Never a foreign conversation's older history.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Collection
from dataclasses import dataclass, field
from typing import Any

from django.db.models import Min, OuterRef, Q, QuerySet, Subquery

from ..conf import turnkit_settings
from ..exceptions import AuthorizationError
from ..models import Message, Turn
from ..runtime.authorization import is_allowed


@dataclass
class TreeConversation:
    """One conversation of a tree, with the principals that own what a read would show."""

    id: str
    principal: Any
    turn_principals: list[Any] = field(default_factory=list)
    #: The canonical JSON of each of ``turn_principals`` (equal principals, one entry).
    keys: set[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        principals, self.turn_principals, self.keys = self.turn_principals, [], set()
        for principal in principals:
            self.add(principal)

    def add(self, principal: Any) -> None:
        key = json.dumps(principal, sort_keys=True, default=str)
        if key not in self.keys:
            self.keys.add(key)
            self.turn_principals.append(principal)


def tree_conversations(root_id: str, *, exclude: Collection[str] = ()) -> list[TreeConversation]:
    """The distinct conversations of the tree's turns (but ``exclude``), first used first.

    One query, one row per conversation and principal its turns act for (not one per turn)."""
    found: dict[str, TreeConversation] = {}
    rows = (Turn.objects.filter(root_turn_id=root_id).exclude(conversation_id__in=list(exclude))
            .values_list("conversation_id", "conversation__principal", "principal")
            .annotate(first=Min("created_at")).order_by("first"))
    for conversation_id, conversation_principal, turn_principal, _first in rows:
        entry = found.setdefault(conversation_id,
                                 TreeConversation(conversation_id, conversation_principal))
        entry.add(turn_principal)
    return list(found.values())


def may_read(root_id: str, conversation: TreeConversation, principal: Any) -> bool:
    """Ask the ``read_messages`` action about one conversation of the tree."""
    return is_allowed("read_messages", principal=principal, root_turn_id=root_id,
                      conversation_id=conversation.id,
                      conversation_principal=conversation.principal,
                      turn_principals=conversation.turn_principals)


class Readable:
    """The conversations of one tree a reader may read, as the tree grows.

    ``decide`` is the rule (by default the policy's ``read_messages``); :meth:`refresh` asks it
    about conversations that joined the tree since (a stream reads them as they appear), and
    again about an allowed one a turn acting for another principal joined since it was decided
    (its ``turn_principals`` grew). A refused conversation stays refused, never asked again.
    """

    def __init__(self, root_id: str, principal: Any,
                 decide: Callable[[TreeConversation], bool] | None = None) -> None:
        self.root_id = root_id
        self.decided: dict[str, bool] = {}
        self._decided_with: dict[str, set[str]] = {}  # the turn principals' keys it was asked
        self._decide = decide or (lambda conversation: may_read(root_id, conversation,
                                                                 principal))

    def refresh(self) -> set[str]:
        refused = [pk for pk, allowed in self.decided.items() if not allowed]
        for conversation in tree_conversations(self.root_id, exclude=refused):
            if conversation.keys <= self._decided_with.get(conversation.id, set()):
                continue  # decided with these principals already
            self.decided[conversation.id] = self._decide(conversation)
            self._decided_with[conversation.id] = conversation.keys
        return self.allowed

    @property
    def allowed(self) -> set[str]:
        return {pk for pk, allowed in self.decided.items() if allowed}


def readable_conversations(root_id: str, principal: Any, *, required: str) -> set[str] | None:
    """The tree's conversations ``principal`` may read; None when every one is (no policy).

    Raises :class:`AuthorizationError` when ``required`` (the handle's own conversation) is not
    readable: nothing of the tree is returned then.
    """
    if turnkit_settings.AUTHORIZATION_POLICY is None:
        return None
    allowed = Readable(root_id, principal).refresh()
    if required not in allowed:
        raise AuthorizationError("read_messages")
    return allowed


def tree_messages(root: Turn, principal: Any = None, *, check: bool = False,
                  ) -> QuerySet[Message]:
    """The tree's transcript (see the module docstring), by conversation then sequence; with
    ``check``, only the conversations ``principal`` may read (the run's own must be readable,
    else :class:`AuthorizationError`)."""
    rows = _transcript(root)
    if check:
        allowed = readable_conversations(root.root_turn_id, principal,
                                         required=root.conversation_id)
        if allowed is not None:
            rows = rows.filter(conversation_id__in=sorted(allowed))
    return rows


def _transcript(root: Turn) -> QuerySet[Message]:
    first_seer = Turn.objects.filter(
        conversation_id=OuterRef("conversation_id"),
        context_sequence__gte=OuterRef("sequence")).order_by(
        "context_sequence", "created_at", "id").values("root_turn_id")[:1]
    return Message.objects.annotate(first_seen_by=Subquery(first_seer)).filter(
        Q(turn__root_turn_id=root.root_turn_id)
        | Q(conversation_id=root.conversation_id, sequence__lte=root.context_sequence)
        | Q(turn__isnull=True, first_seen_by=root.root_turn_id),
        conversation_id__in=Turn.objects.tree(root.root_turn_id).values("conversation_id"),
    ).order_by("conversation__created_at", "sequence")


__all__ = ["Readable", "TreeConversation", "may_read", "readable_conversations",
           "tree_conversations", "tree_messages"]
