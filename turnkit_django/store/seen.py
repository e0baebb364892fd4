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
from itertools import chain
from operator import attrgetter, eq

from ..messages import ChatMessage

#: How many conversations a process remembers.
CONVERSATIONS = 256


@dataclass(frozen=True)
class Prefix:
    """A conversation's messages with a sequence up to ``upto`` (all of them, in order), with
    the kinds and tool-call ids among them."""

    upto: int
    messages: tuple[ChatMessage, ...]
    kinds: frozenset[str] = frozenset()
    call_ids: frozenset[str] = frozenset()


@dataclass
class History:
    """The messages a turn sees, in sequence order, and what the runtime asks about all of them
    (which kinds occur, which tool-call ids are taken, whether they are the conversation's whole
    history), kept up to date as messages are added so that no step walks the whole list: at a
    few hundred messages, a walk costs more than the rest of the step (each message is a cold
    object in memory)."""

    messages: list[ChatMessage]
    kinds: set[str]
    call_ids: set[str]
    #: The messages are exactly the conversation's sequences 1..n.
    whole: bool

    @classmethod
    def of(cls, messages: Sequence[ChatMessage], known: Prefix | None = None) -> History:
        """The history of ``messages``, of which the first ``len(known.messages)`` are
        ``known``'s (their facts are taken from it; the rest are looked at once)."""
        start = len(known.messages) if known is not None else 0
        rest = messages[start:]
        kinds = set(known.kinds) if known is not None else set()
        kinds.update(map(attrgetter("kind"), rest))
        call_ids = set(known.call_ids) if known is not None else set()
        call_ids.update(chain.from_iterable(map(attrgetter("call_ids"), rest)))
        if known is None or known.upto == start:  # the known part is 1..start
            whole = all(map(eq, map(attrgetter("sequence"), rest),
                            range(start + 1, len(messages) + 1)))
        else:
            whole = False
        return cls(list(messages), kinds, call_ids, whole)

    def add(self, message: ChatMessage) -> None:
        self.messages.append(message)
        self.kinds.add(message.kind)
        self.call_ids |= message.call_ids
        self.whole = self.whole and message.sequence == len(self.messages)

    def prefix(self) -> Prefix:
        """The whole history as the cache keeps it."""
        return Prefix(len(self.messages), tuple(self.messages), frozenset(self.kinds),
                      frozenset(self.call_ids))


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
                 read: Callable[[int], Iterable[ChatMessage]]) -> History:
    """The messages a turn with input up to ``upto`` sees: the remembered prefix, then what
    ``read(after)`` returns (messages with a greater sequence, in order: the rest of the input
    and the turn's own). Remembers the input part for the next turn."""
    prefix = SEEN.get(conversation_id, upto)
    after = prefix.upto if prefix is not None else 0
    known: Sequence[ChatMessage] = prefix.messages if prefix is not None else ()
    history = History.of([*known, *read(after)], prefix)
    if prefix is None or upto > prefix.upto:
        inputs = [m for m in history.messages[len(known):]
                  if m.sequence is not None and m.sequence <= upto]
        remember_history(conversation_id, History.of([*known, *inputs], prefix))
    return history


def history_before(conversation_id: str, sequence: int) -> Prefix | None:
    """Every message of the conversation before ``sequence``, if this process has them all."""
    prefix = SEEN.get(conversation_id, sequence - 1)
    return prefix if prefix is not None and prefix.upto == sequence - 1 else None


def remember_history(conversation_id: str, history: History) -> None:
    """Remember ``history`` (committed messages) if it is the conversation's whole history.

    Sequences are gap-free from 1, so messages numbered exactly 1..n are every message up to n:
    a turn that saw all of them (its input and everything it appended, with nobody else writing
    in between) leaves the next turn of its conversation nothing to read but its own input.
    """
    if history.whole and history.messages:
        SEEN.put(conversation_id, history.prefix())


__all__ = ["SEEN", "History", "Prefix", "Seen", "history_before", "read_through",
           "remember_history"]
