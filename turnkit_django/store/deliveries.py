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
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import Exists, OuterRef, Q, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from ..base.serialization import JsonMapping, JsonObject, canonical
from ..events import emit
from ..exceptions import DeliveryConflict
from ..messages import TextPart
from ..models import Conversation, Delivery, Message, Turn, Wait
from .compiled import CompiledRead
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


#: Raised when a delivery id names no delivery.
NoSuchDelivery = Delivery.DoesNotExist


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


# --------------------------------------------------------------------------- reads


def pending_rows(limit: int, after: tuple[datetime, str] | None) -> list[tuple[datetime, str]]:
    """Read up to ``limit`` pending deliveries as ``(created_at, id)``, oldest first, starting
    after ``after`` and then from the oldest again (only pending rows: the partial index)."""
    pending = Delivery.objects.pending().order_by("created_at", "id")
    rows: list[tuple[datetime, str]] = []
    if after is not None:
        rows = list(pending.filter(Q(created_at__gt=after[0])
                                   | Q(created_at=after[0], id__gt=after[1]))
                    .values_list("created_at", "id")[:limit])
    if len(rows) < limit:
        seen = {pk for _, pk in rows}
        rows += [r for r in pending.values_list("created_at", "id")[:limit - len(rows)]
                 if r[1] not in seen]
    return rows


def conversation_busy(conversation_id: str) -> bool:
    """Read whether a turn of the conversation is pending (even unsubmitted), running, waiting
    or paused."""
    return Turn.objects.filter(conversation_id=conversation_id).active().exists()


def _lane_read(conversation_id: str, turn_id: str | None = None) -> QuerySet[Conversation, Any]:
    """The lane's state (see :func:`lane`); with ``turn_id``, whether turns wait for it."""
    turns = Turn.objects.filter(conversation_id=OuterRef("pk"))
    consumed = Coalesce(Subquery(turns.order_by("-created_at", "-id")
                                 .values("context_sequence")[:1]), 0)
    buffered = Message.objects.deliveries_after(OuterRef("pk"), consumed)
    read = Conversation.objects.filter(pk=conversation_id).annotate(
        following=Subquery(turns.queued_in_lane().values("pk")[:1]),
        busy=Exists(turns.active()), buffered=Exists(buffered))
    if turn_id is None:
        return read.values_list("following", "busy", "buffered")
    return read.annotate(waited_for=Exists(Wait.objects.filter(target_id=turn_id))).values_list(
        "following", "busy", "buffered", "waited_for")


_LANE = CompiledRead(_lane_read, 1)
_ENDED = CompiledRead(_lane_read, 2)


def lane(conversation_id: str) -> tuple[str | None, bool, bool]:
    """Read the conversation's next queued turn, whether a turn of it is active, and whether a
    delivered message lies past its newest turn's input: one query, compiled once."""
    found = _LANE.rows(conversation_id)
    return (None, False, False) if not found else (found[0][0], bool(found[0][1]),
                                                   bool(found[0][2]))


def ended_lane(conversation_id: str, turn_id: str) -> tuple[Any, ...] | None:
    """:func:`lane`, and whether turns wait for ``turn_id``: ``(following, busy, buffered,
    waited_for)``, None when the conversation is gone. One query, compiled once."""
    found = _ENDED.rows(conversation_id, turn_id)
    return found[0] if found else None


def latest_turn(conversation_id: str) -> Mapping[str, Any] | None:
    """Read the ``context_sequence`` and ``submitted_at`` of the conversation's newest turn."""
    return (Turn.objects.filter(conversation_id=conversation_id).order_by("-created_at", "-id")
            .values("context_sequence", "submitted_at").first())


def buffered_messages(conversation_id: str, consumed: int,
                      limit: int) -> list[tuple[str, JsonMapping]]:
    """Read up to ``limit`` delivered messages past ``consumed``: ``(id, metadata)``."""
    return list(Message.objects.deliveries_after(conversation_id, consumed)
                .values_list("pk", "metadata")[:limit])


def turns_with_roots(turn_ids: Collection[str]) -> dict[str, Turn]:
    """Read the turns ``turn_ids`` that exist, each with its root turn, keyed by id."""
    return Turn.objects.select_related("root_turn").in_bulk(turn_ids)


__all__ = ["COMPLETION_PREFIX", "AlreadyDelivered", "Delivered", "NoSuchDelivery", "Wake",
           "append_delivered", "buffered_messages", "conversation_busy", "create", "deliver",
           "delivery_by_key", "ended_lane", "lane", "latest_turn", "pending_rows",
           "turns_with_roots", "wake_conversation"]
