"""Checking what the public entry points are given: text, ids, conversations, cursors.

Each check runs before anything is written and raises an error that says what is accepted:
:class:`~turnkit_django.exceptions.InputError` (also a ``ValueError``) for a value of the wrong
kind, :class:`TurnNotFound` / :class:`ConversationNotFound` (also the model's ``DoesNotExist``)
for an id that names no row. Errors name types and ids, never the text they refuse.
"""

from __future__ import annotations

from typing import TypeVar

from django.db.models import Model

from ..base.serialization import checked_text, unstorable
from ..conf import MODEL_LENGTH
from ..exceptions import InputError, NotFound
from ..models import Conversation, Turn

M = TypeVar("M", bound=Model)

#: The longest idempotency key an application may pass (``ask``, ``say``, ``post``, ``steer``):
#: stored under a prefix in a 255-character column, so every database keeps it as given.
KEY_LENGTH = 200


class TurnNotFound(NotFound, Turn.DoesNotExist):
    """No turn has the given id."""


class ConversationNotFound(NotFound, Conversation.DoesNotExist):
    """No conversation has the given id."""


def _kind(value: object) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def require_text(value: object, what: str, *, hint: str = "") -> str:
    """``value`` if it is a non-empty ``str`` every database stores as given; InputError
    otherwise (what every model and transcript expects of user text)."""
    if isinstance(value, str) and value.strip():
        return checked_text(value, what)  # and storable: no NUL, no lone surrogate
    got = ("an empty str" if not value else "a blank str") if isinstance(value, str) \
        else _kind(value)
    raise InputError(f"{what} must be a non-empty str, got {got}{hint}")


def idempotency_key(value: object, what: str, *, length: int = KEY_LENGTH) -> str:
    """An application's idempotency key: a non-blank ``str`` of at most ``length`` (default
    :data:`KEY_LENGTH`) characters that every database stores as given; InputError otherwise,
    before any write."""
    if not isinstance(value, str) or not value.strip():
        raise InputError(f"{what} needs a non-empty key= (its idempotency key), "
                         f"got {_kind(value) if not isinstance(value, str) else repr(value)}")
    if len(value) > length:
        raise InputError(f"{what}: key= has {len(value)} characters, at most {length} are "
                         "kept; use a shorter key (a digest of a longer one, for example)")
    return checked_text(value, f"{what}: key=")


def flag(value: object, what: str) -> bool:
    """``value`` if it is True or False; InputError otherwise (``cascade="no"`` is no False)."""
    if isinstance(value, bool):
        return value
    raise InputError(f"{what} must be True or False, got {repr(value)[:40]}")


def event_callback(value: object, *, inline: bool = True) -> None:
    """Refuse an ``on_event=`` that is neither None nor callable (InputError), before a write:
    the events would otherwise go to a callback that fails each time, logged and unheard. Not
    ``inline`` (a turn handed to background execution), any callback is refused: the turn runs
    on a worker, in another process, which never calls it."""
    if value is not None and not callable(value):
        raise InputError(f"on_event= must be a callable receiving each Event (or None), got "
                         f"{_kind(value)}")
    if value is not None and not inline:
        raise InputError("on_event= is called only by a turn executed in this process (run(), "
                         "execute(), ask() without submit=True); a submitted turn runs on a "
                         "worker: listen there with the turnkit_django.events signals, or read "
                         "run.events()")


def delta_callback(value: object, *, inline: bool = True) -> None:
    """Refuse an ``on_delta=`` that is neither None nor callable, or any one given to a turn
    that does not run inline in this process (InputError), before a write."""
    if value is not None and not callable(value):
        raise InputError(f"on_delta= must be a callable receiving each Delta (or None), got "
                         f"{_kind(value)}")
    if value is not None and not inline:
        raise InputError("on_delta= is called only by a turn run inline in this process "
                         "(agent.run(), conv.ask() without submit=True); a prepared or "
                         "submitted turn streams nothing to this process")


def prepared_callback(value: object) -> None:
    """Refuse to submit a turn prepared with an ``on_event=`` (InputError), before a write: the
    worker that runs it never calls a callback of this process, which was dropped silently."""
    if value is not None:
        raise InputError("this run was prepared with on_event=, which is called only by a turn "
                         "executed in this process: run it here with execute(), or prepare it "
                         "without on_event= to submit it (a worker's events go to the "
                         "turnkit_django.events signals, and to run.events())")


def model_problem(value: object) -> str | None:
    """What is wrong with ``value`` as a model name (None or a non-blank str of at most
    ``MODEL_LENGTH`` characters), or None when nothing is."""
    if value is None or (isinstance(value, str) and value.strip() == value and value
                         and len(value) <= MODEL_LENGTH):
        return None
    shown = _kind(value)
    if isinstance(value, str) and value.strip():
        shown = (f"{value!r}, with surrounding whitespace" if value.strip() != value
                 else f"{len(value)} characters")
    return (f"must be a model name (a non-blank str of at most {MODEL_LENGTH} characters, "
            "without surrounding whitespace, such as 'claude-sonnet-5-5') or None for the "
            f"default, got {shown}")


def optional_count(value: object, what: str) -> int | None:
    """``value`` if it is None or an int >= 0 (not a bool); InputError otherwise."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool) and value >= 0):
        return value
    raise InputError(f"{what} must be None or an int >= 0, got {repr(value)[:40]}")


def optional_text(value: object, what: str) -> str | None:
    """``value`` if it is None or a ``str`` every database stores as given (empty allowed:
    an optional note); InputError otherwise."""
    if value is None:
        return None
    if isinstance(value, str):
        return checked_text(value, what)
    raise InputError(f"{what} must be a str or None, got {_kind(value)}")


def require_subject(subject: object) -> Model | None:
    """A conversation's subject: None or a saved model instance (the row it points to)."""
    if subject is None or (isinstance(subject, Model) and subject.pk is not None):
        return subject
    got = f"an unsaved {type(subject).__name__}" if isinstance(subject, Model) \
        else _kind(subject)
    raise InputError(f"subject must be a saved model instance (the conversation points to its "
                     f"row and gives its to_prompt() or str() to the model), got {got}")


#: The largest cursor: sequences and event ids are bigints, so no row lies past it.
MAX_CURSOR = 2 ** 63 - 1
#: Its digits (a longer string is refused before Python converts it: past 4,300 digits that
#: conversion itself raises ValueError).
_CURSOR_DIGITS = len(str(MAX_CURSOR))


def cursor(value: object, where: str) -> int:
    """A cursor read's ``after``: a non-negative int up to :data:`MAX_CURSOR` (or its decimal
    digits, as an HTTP ``Last-Event-ID`` arrives)."""
    if isinstance(value, str) and value.isascii() and value.isdigit() \
            and len(value.lstrip("0")) <= _CURSOR_DIGITS:
        value = int(value)
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_CURSOR:
        return value
    raise InputError(f"{where}: after= is a cursor, a non-negative int up to {MAX_CURSOR} (the "
                     f"last sequence or event id read, 0 for the start), got {_shown(value)}")


def _shown(value: object) -> str:
    """A refused cursor as an error names it: short, never converting a huge int to text."""
    if isinstance(value, int) and not isinstance(value, bool):
        return f"an int of {value.bit_length()} bits" if value.bit_length() > 64 else repr(value)
    return repr(value)[:40] if isinstance(value, str) else _kind(value)


def _by_id(model: type[M], missing: type[NotFound], value: object, where: str, *,
           kind: str, prefix: str, other: tuple[str, str, str]) -> M:
    """The ``model`` row ``value`` names; ``missing`` otherwise, with a hint when ``value`` is
    an id of the ``other`` kind (its prefix, its name and the loader that takes it)."""
    # An id no database can store (a NUL, a lone surrogate) names no row: PostgreSQL would
    # refuse the query itself (DataError) rather than find nothing.
    found = model._default_manager.filter(pk=value).first() \
        if isinstance(value, str) and unstorable(value) is None else None
    if found is not None:
        return found
    other_prefix, other_kind, loader = other
    hint = (f"; that is a {other_kind} id: use {loader}"
            if isinstance(value, str) and value.startswith(other_prefix)
            else f"; it takes a {kind} id (a str like '{prefix}...')")
    raise missing(f"{where}: no {kind} {value!r}{hint}")


def turn_row(turn_id: object, where: str) -> Turn:
    """The turn ``turn_id`` names; TurnNotFound otherwise."""
    return _by_id(Turn, TurnNotFound, turn_id, where, kind="turn", prefix="turn_",
                  other=("conv_", "conversation", "load_conversation()"))


def conversation_by_id(conversation_id: object, where: str) -> Conversation:
    """The conversation ``conversation_id`` names; ConversationNotFound otherwise."""
    return _by_id(Conversation, ConversationNotFound, conversation_id, where,
                  kind="conversation", prefix="conv_",
                  other=("turn_", "turn", "load_turn() or load_run()"))


def conversation_row(value: object, where: str) -> Conversation:
    """A conversation given as a handle, a row or an id; InputError or ConversationNotFound."""
    row = getattr(value, "row", value)
    if isinstance(row, Conversation):
        return row
    if not isinstance(value, str) or not value:
        raise InputError(f"{where} takes a conversation: a Conversation handle, a "
                         f"turnkit_django.models.Conversation or a conversation id (a str "
                         f"like 'conv_...'), got {_kind(value)}")
    return conversation_by_id(value, where)


def callback_row(value: object) -> Conversation | None:
    """The conversation ``submit(callback=...)`` names, if any."""
    return None if value is None else conversation_row(value, "submit(callback=...)")


__all__ = [
    "KEY_LENGTH",
    "MAX_CURSOR",
    "MODEL_LENGTH",
    "ConversationNotFound",
    "TurnNotFound",
    "callback_row",
    "conversation_by_id",
    "conversation_row",
    "cursor",
    "event_callback",
    "flag",
    "idempotency_key",
    "model_problem",
    "optional_count",
    "optional_text",
    "prepared_callback",
    "require_subject",
    "require_text",
    "turn_row",
]
