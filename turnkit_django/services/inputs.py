"""Idempotent application input: ``conv.post`` (next-turn input), ``ask(key=...)``, receipts.

``post`` is a delivery from the conversation to itself (key ``post:<conversation>:<key>``): a
busy conversation buffers it for its next turn, so a running turn's frozen input never changes;
an idle one starts a continuation turn for it, acting for the conversation's principal. An
``ask`` key is stored on the input message (unique per conversation). Either way a retry with
the same key and text returns what the first call made, and :func:`input_status` says whether
a turn has taken the input yet, and which.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..base.serialization import JsonMapping
from ..exceptions import DeliveryConflict, InputNotFound, KeyConflict
from ..messages import Part, TextPart, text_of
from ..models import Conversation, Delivery, Message, Turn
from ..runtime.authorization import authorize
from ..runtime.deliveries import send_message
from ..store import InputKeyTaken, append_input
from ..store.deliveries import POST_PREFIX
from ..store.input_checks import idempotency_key
from ..store.transcript import to_chat


def post_key(conversation_id: str, key: str) -> str:
    return f"{POST_PREFIX}{conversation_id}:{key}"


def _checked(key: str) -> str:
    return idempotency_key(key, "an idempotent input")


def post(conversation: Conversation, text: str, *, key: str, principal: Any = None,
         ) -> Delivery:
    """Durable input for the conversation's next turn, once per ``key``.

    A conflict names the caller's ``key``, not the delivery key it is stored under (which
    carries the conversation id)."""
    try:
        return send_message(conversation, conversation, text,
                            key=post_key(conversation.pk, _checked(key)), principal=principal)
    except DeliveryConflict:
        raise DeliveryConflict(key) from None


def keyed_input(conversation: Conversation, key: str, text: str) -> Message | None:
    """The input an earlier ``ask(key=...)`` appended; KeyConflict if its text differs."""
    found = Message.objects.filter(conversation_id=conversation.pk, key=_checked(key)).first()
    if found is not None and to_chat(found).text != text:
        raise KeyConflict(key, "input")
    return found


def say(conversation: Conversation, text: str, *, metadata: JsonMapping | None = None,
        key: str | None = None) -> Message:
    """Append ``text`` as user input; with ``key``, once per key: a retry, even one racing
    the first call, returns the message the first call appended (KeyConflict: other text)."""
    if key is None:
        return append_input(conversation.pk, [TextPart(text)], metadata=metadata)
    found = keyed_input(conversation, key, text)
    if found is not None:
        return found
    try:
        return append_input(conversation.pk, [TextPart(text)], metadata=metadata, key=key)
    except InputKeyTaken:
        found = keyed_input(conversation, key, text)
        if found is None:  # pragma: no cover - the key was taken by a committed input
            raise
        return found


def answer_once(conversation: Conversation, text: str, key: str | None,
                create: Callable[[list[Part], str | None], Turn]) -> Turn:
    """The turn answering the input ``text``: ``create(parts, key)`` makes it; with ``key``,
    once per key: a retry, even one racing the first call, gets the turn that took the input
    (an input said with the key and answered by no turn yet is answered without appending)."""
    if key is None:
        return create([TextPart(text)], None)
    try:
        return _answer_keyed(conversation, text, key, create)
    except InputKeyTaken:  # a racing call stored the input first: answer as its retry
        return _answer_keyed(conversation, text, key, create)


def _answer_keyed(conversation: Conversation, text: str, key: str,
                  create: Callable[[list[Part], str | None], Turn]) -> Turn:
    found = keyed_input(conversation, key, text)
    if found is None:
        return create([TextPart(text)], key)
    return taker(found) or create([], None)


def taker(message: Message) -> Turn | None:
    """The first turn whose input includes ``message``."""
    return Turn.objects.filter(conversation_id=message.conversation_id,
                               context_sequence__gte=message.sequence).order_by(
        "created_at", "id").first()


@dataclass(frozen=True)
class InputStatus:
    """Where an idempotent input stands: ``pending`` (no turn took it yet) or ``applied``."""

    key: str
    status: str
    turn_id: str | None = None
    message_id: str | None = None
    text: str = ""


def input_status(conversation: Conversation, key: str, *, principal: Any = None,
                 check: bool = False) -> InputStatus:
    """The receipt of the input ``key`` (posted or asked) of ``conversation``.

    Raises InputNotFound (also a LookupError) when the conversation has no input with that
    key.
    """
    if check:
        authorize("read_messages", principal=principal, conversation_id=conversation.pk,
                  conversation_principal=conversation.principal)
    message = Message.objects.filter(conversation_id=conversation.pk, key=_checked(key)).first()
    text = ""
    if message is None:
        delivery = Delivery.objects.filter(key=post_key(conversation.pk, key),
                                           destination_conversation_id=conversation.pk).first()
        if delivery is None:
            raise InputNotFound(conversation.pk, key)
        text = str((delivery.payload or {}).get("text") or "")
        if delivery.message_id is None:
            return InputStatus(key, "pending", text=text)
        message = Message.objects.get(pk=delivery.message_id)
    text = text or text_of(to_chat(message).parts)
    turn = taker(message)
    if turn is None:
        return InputStatus(key, "pending", message_id=message.pk, text=text)
    return InputStatus(key, "applied", turn.pk, message.pk, text)


__all__ = ["InputStatus", "answer_once", "input_status", "keyed_input", "post", "post_key",
           "say", "taker"]
