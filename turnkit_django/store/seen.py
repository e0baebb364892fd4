"""The transcripts this process has read, kept so the next turn reads only what is new.

Messages are append-only: a stored message never changes and sequences are allocated gap-free
under the conversation's row lock, in the transaction that inserts the message. So once a turn
has read a conversation up to its frozen input (``context_sequence``), every message up to that
sequence is committed and final, and the next turn of the conversation only needs the messages
past it. This cache keeps, per recently read conversation, the messages up to the highest such
sequence as the model sees them (:class:`~turnkit_django.messages.ChatMessage`, whose size for
the token estimate is also computed once). It is bounded (least recently used conversations go
first) and safe to share between threads.
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from operator import attrgetter, eq

from ..messages import ChatMessage

#: How many conversations a process remembers.
CONVERSATIONS = 256


@dataclass(frozen=True)
class Prefix:
    """A conversation's messages with a sequence up to ``upto`` (all of them, in order)."""

    upto: int
    messages: tuple[ChatMessage, ...]


class Seen:
    """Prefixes of conversations' transcripts, least recently used first out."""

    def __init__(self, size: int = CONVERSATIONS) -> None:
        self._size = size
        self._items: OrderedDict[str, Prefix] = OrderedDict()
        self._lock = threading.Lock()

    def get(self, conversation_id: str, upto: int) -> Prefix | None:
        """The remembered prefix of ``conversation_id`` if it ends at or before ``upto``."""
        with self._lock:
            prefix = self._items.get(conversation_id)
            if prefix is None or prefix.upto > upto:
                return None
            self._items.move_to_end(conversation_id)
            return prefix

    def put(self, conversation_id: str, prefix: Prefix) -> None:
        with self._lock:
            known = self._items.get(conversation_id)
            if known is None or known.upto <= prefix.upto:
                self._items[conversation_id] = prefix
                self._items.move_to_end(conversation_id)
            while len(self._items) > self._size:
                self._items.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._items.clear()


SEEN = Seen()


def read_through(conversation_id: str, upto: int,
                 read: Callable[[int], Iterable[ChatMessage]]) -> list[ChatMessage]:
    """The messages a turn with input up to ``upto`` sees: the remembered prefix, then what
    ``read(after)`` returns (messages with a greater sequence, in order: the rest of the input
    and the turn's own). Remembers the input part for the next turn."""
    prefix = SEEN.get(conversation_id, upto)
    after = prefix.upto if prefix is not None else 0
    known: Sequence[ChatMessage] = prefix.messages if prefix is not None else ()
    new = list(read(after))
    if prefix is None or upto > prefix.upto:
        inputs = (*known, *(m for m in new if m.sequence is not None and m.sequence <= upto))
        SEEN.put(conversation_id, Prefix(upto, inputs))
    return [*known, *new]


def history_before(conversation_id: str, sequence: int) -> tuple[ChatMessage, ...] | None:
    """Every message of the conversation before ``sequence``, if this process has them all."""
    prefix = SEEN.get(conversation_id, sequence - 1)
    return prefix.messages if prefix is not None and prefix.upto == sequence - 1 else None


def remember_history(conversation_id: str, messages: Sequence[ChatMessage]) -> None:
    """Remember ``messages`` (committed, in order) if they are the conversation's whole history.

    Sequences are gap-free from 1, so messages numbered exactly 1..n are every message up to n:
    a turn that saw all of them (its input and everything it appended, with nobody else writing
    in between) leaves the next turn of its conversation nothing to read but its own input.
    """
    numbered = map(attrgetter("sequence"), messages)
    if messages and all(map(eq, numbered, range(1, len(messages) + 1))):
        SEEN.put(conversation_id, Prefix(len(messages), tuple(messages)))


__all__ = ["SEEN", "Prefix", "Seen", "history_before", "read_through", "remember_history"]
