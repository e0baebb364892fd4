"""Durable messages between conversations, as use cases.

The logic is in :mod:`turnkit_django.runtime.deliveries` (turns deliver and wake too). The
application's :func:`send_message` refuses the keys of turnkit's own namespaces first.
"""

from __future__ import annotations

from ..exceptions import InputError
from ..models import Conversation, Delivery, Turn
from ..runtime import deliveries
from ..runtime.deliveries import deliver, wake
from ..store.deliveries import RESERVED_PREFIXES
from ..store.input_checks import idempotency_key

#: What the ``Delivery.key`` column holds: an application's key is stored as given.
DELIVERY_KEY_LENGTH = 255


def send_message(source: Conversation, destination: Conversation, text: str, *, key: str,
                 principal: object, source_turn: Turn | None = None) -> Delivery:
    """``conv.send_message``: :func:`turnkit_django.runtime.deliveries.send_message` with an
    application key, which may not start with a prefix turnkit reserves (completion
    callbacks, ``post``, the ``send_message`` tool): keys are store-wide, and one taken first
    would fail another turn's callback or another conversation's ``post``. A key or a
    ``source_turn`` it cannot use raises InputError, before anything is written."""
    key = idempotency_key(key, "conv.send_message()", length=DELIVERY_KEY_LENGTH)
    if source_turn is not None and not isinstance(source_turn, Turn):
        raise InputError(f"conv.send_message(): source_turn= takes a turn handle or a "
                         f"turnkit_django.models.Turn of the sending conversation (or None), "
                         f"got a {type(source_turn).__name__}")
    if source_turn is not None and source_turn.conversation_id != source.pk:
        raise InputError(f"conv.send_message(): source_turn= is turn {source_turn.pk!r} of "
                         f"another conversation; pass a turn of {source.pk!r}, or None")
    reserved = next((prefix for prefix in RESERVED_PREFIXES if key.startswith(prefix)), None)
    if reserved is not None:
        raise InputError(f"delivery key {key[:60]!r} starts with {reserved!r}, which turnkit "
                         "reserves for its own deliveries; choose a key without it")
    return deliveries.send_message(source, destination, text, key=key, principal=principal,
                                   source_turn=source_turn)


__all__ = ["deliver", "send_message", "wake"]
