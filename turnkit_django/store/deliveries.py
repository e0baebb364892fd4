"""Deliveries: durable messages between conversations, created once per store-wide key.

:func:`create` stores a delivery under its key, or returns the identical one already stored
(a retry); a different message under a taken key raises :class:`DeliveryConflict` without
revealing the other. :func:`append_delivered` appends its message to the destination once,
under the destination's conversation lock; :func:`deliver` does it and wakes the destination
in one transaction, :func:`wake_conversation` wakes it alone. Waking (creating the continuation
turn of an idle destination) is the caller's ``wake``, called holding the conversation lock.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

from django.db import IntegrityError, transaction
from django.utils import timezone

from ..base.serialization import JsonMapping, JsonObject, canonical
from ..events import emit
from ..exceptions import DeliveryConflict
from ..messages import TextPart
from ..models import Conversation, Delivery, Message, Turn
from .locks import lock_conversation
from .transcript import NewMessage, insert_messages

COMPLETION_PREFIX = "completion:"
#: ``conv.post``'s keys (``post:<conversation id>:<key>``).
POST_PREFIX = "post:"
#: The ``send_message`` tool's keys (``turnkit:send:<execution id>``).
TOOL_PREFIX = "turnkit:"
#: The namespaces of the keys turnkit makes itself: an application's key in one of them could
#: take another turn's callback key, or another conversation's post key, first.
RESERVED_PREFIXES = (COMPLETION_PREFIX, POST_PREFIX, TOOL_PREFIX)


def delivery_by_key(key: str) -> Delivery | None:
    """Read the delivery stored under ``key``, or None when there is none."""
    return Delivery.objects.filter(key=key).first()


@dataclass(frozen=True)
class _Identity:
    """What a retry under the same key must repeat exactly."""

    source_conversation_id: str | None
    destination_conversation_id: str
    source_turn_id: str | None
    payload: str

    @classmethod
    def of(cls, delivery: Delivery) -> _Identity:
        return cls(delivery.source_conversation_id, delivery.destination_conversation_id,
                   delivery.source_turn_id, canonical(delivery.payload))


def create(*, key: str, destination_id: str, payload: JsonMapping,
           source_id: str | None = None, source_turn_id: str | None = None) -> Delivery:
    """Create the delivery for ``key``, or return the identical one already stored."""
    if not isinstance(key, str) or not key or len(key) > 255:
        raise ValueError("a delivery key must be a non-empty string of at most 255 characters")
    payload = json.loads(canonical(payload))
    wanted = _Identity(source_id, destination_id, source_turn_id, canonical(payload))
    existing = Delivery.objects.filter(key=key).first()
    if existing is None:
        try:
            with transaction.atomic():
                return Delivery.objects.create(
                    key=key, source_conversation_id=source_id,
                    destination_conversation_id=destination_id, source_turn_id=source_turn_id,
                    payload=payload)
        except IntegrityError:
            # A concurrent sender won the key; compare against what it stored.
            existing = Delivery.objects.filter(key=key).first()
            if existing is None:
                raise
    if _Identity.of(existing) != wanted:
        raise DeliveryConflict(key)
    return existing


def append_delivered(delivery_id: str) -> tuple[Conversation, Delivery, Message | None]:
    """Lock the destination and append the delivery's message once; return what was written.

    Call inside a transaction. The message is None when the delivery was already delivered.
    """
    destination_id = (Delivery.objects.filter(pk=delivery_id)
                      .values_list("destination_conversation_id", flat=True).get())
    conversation = lock_conversation(destination_id)
    delivery = Delivery.objects.get(pk=delivery_id)
    if delivery.delivered_at is not None:
        return conversation, delivery, None
    payload = delivery.payload or {}
    metadata: JsonObject = {
        "delivery_id": delivery.pk,
        "source": {"conversation_id": delivery.source_conversation_id,
                   "turn_id": delivery.source_turn_id},
        "sender_principal": payload.get("sender_principal"),
    }
    if delivery.key.startswith(COMPLETION_PREFIX):
        metadata["callback"] = True
    if payload.get("from_model"):  # sent by a model's send_message tool, not the application
        metadata["from_model"] = True
    message = insert_messages(destination_id, [
        NewMessage("user", [TextPart(str(payload.get("text", "")))], metadata=metadata)])[0]
    delivered_at = timezone.now()
    Delivery.objects.filter(pk=delivery.pk).pending().update(message=message,
                                                             delivered_at=delivered_at)
    delivery.message, delivery.delivered_at = message, delivered_at
    return conversation, delivery, message


#: The caller's wake: given the locked conversation row, the continuation it created, if any.
Wake = Callable[[Conversation], "Turn | None"]


@dataclass(frozen=True)
class Delivered:
    """The delivery's message was appended, and ``continuation`` created to answer it (None:
    the destination was busy, or nothing to wake)."""

    delivery: Delivery
    message: Message
    continuation: Turn | None


@dataclass(frozen=True)
class AlreadyDelivered:
    """The delivery had been delivered already: nothing was written."""

    delivery: Delivery


def deliver(delivery_id: str, wake: Wake) -> Delivered | AlreadyDelivered:
    """In one transaction: append the delivery's message to its destination once (under the
    destination's conversation lock), wake the destination (``wake``) and emit
    ``delivery.delivered``."""
    with transaction.atomic():
        conversation, delivery, message = append_delivered(delivery_id)
        if message is None:
            return AlreadyDelivered(delivery)
        continuation = wake(conversation)
        emit("delivery.delivered", turn_id=continuation.pk if continuation else None,
             conversation_id=conversation.pk, delivery_id=delivery.pk, message_id=message.pk,
             sequence=message.sequence, continuation_turn_id=continuation.pk if continuation
             else None)
    return Delivered(delivery, message, continuation)


def wake_conversation(conversation_id: str, wake: Wake) -> Turn | None:
    """In one transaction: lock the conversation and ``wake`` it; return the continuation."""
    with transaction.atomic():
        return wake(lock_conversation(conversation_id))


__all__ = ["COMPLETION_PREFIX", "AlreadyDelivered", "Delivered", "Wake", "append_delivered",
           "create", "deliver", "delivery_by_key", "wake_conversation"]
