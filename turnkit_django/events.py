"""Lifecycle events as Django signals, sent after the transaction that made the fact commits.

Connect to :data:`event` for every event, or to a named signal (``turn_completed`` ...). Each
receiver gets ``event=Event(...)``. Events are notifications, not the record: the tables are.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime

from django.db import transaction
from django.dispatch import Signal
from django.utils import timezone

from .base.serialization import JsonObject, JsonValue
from .observability import metrics, tracing

logger = logging.getLogger("turnkit_django.events")

EVENT_TYPES = (
    "turn.started",
    "turn.completed",
    "turn.failed",
    "turn.cancelled",
    "turn.recovered",
    "turn.handed_back",
    "turn.stale",
    "turn.waiting",
    "model.requested",
    "model.completed",
    "model.rate_limited",
    "model.waiting_for_slot",
    "tool_call.started",
    "tool_call.completed",
    "tool_call.failed",
    "tool_call.interrupted",
    "tool_call.skipped",
    "tool.retrying",
    "message.created",
    "delivery.delivered",
    "sub_agent.delegated",
    "image.requested",
    "image.completed",
    "image.failed",
    "media.requested",
    "media.completed",
    "media.failed",
    "evaluation.requested",
    "evaluation.completed",
    "evaluation.failed",
    "output_policy.revision",
    "output_policy.completed",
    # Interactive controls (also durable rows of the event table, see run.events()).
    "turn.paused",
    "turn.resumed",
    "turn.pause_requested",
    "turn.steer_requested",
    "approval.requested",
    "approval.approved",
    "approval.denied",
    "approval.expired",
    "approval.cancelled",
)

#: Sent for every event.
event = Signal()
#: One signal per event type, named with underscores (``turn_completed`` ...).
signals: dict[str, Signal] = {name: Signal() for name in EVENT_TYPES}

turn_started = signals["turn.started"]
turn_completed = signals["turn.completed"]
turn_failed = signals["turn.failed"]
turn_cancelled = signals["turn.cancelled"]
turn_recovered = signals["turn.recovered"]
model_requested = signals["model.requested"]
model_completed = signals["model.completed"]
tool_call_started = signals["tool_call.started"]
tool_call_completed = signals["tool_call.completed"]
tool_call_failed = signals["tool_call.failed"]
tool_call_interrupted = signals["tool_call.interrupted"]
message_created = signals["message.created"]
delivery_delivered = signals["delivery.delivered"]
turn_paused = signals["turn.paused"]
turn_resumed = signals["turn.resumed"]
approval_requested = signals["approval.requested"]
approval_approved = signals["approval.approved"]
approval_denied = signals["approval.denied"]

EventCallback = Callable[["Event"], object]


@dataclass(frozen=True)
class Event:
    type: str
    turn_id: str | None
    conversation_id: str | None
    payload: JsonObject = field(default_factory=dict)
    created_at: datetime = field(default_factory=timezone.now)


def emit(
    type_: str,
    *,
    turn_id: str | None,
    conversation_id: str | None,
    callback: EventCallback | None = None,
    started_at: datetime | None = None,
    **payload: JsonValue,
) -> None:
    """Send the event once the current transaction commits (at once outside one).

    A turn's end (``turn.completed`` ...) is also counted in :mod:`.metrics`, with the turn's
    duration from ``started_at`` (its first claim) when given.
    """
    measure = metrics.turn_event(type_, payload, started_at)
    tracing.turn_event(type_, turn_id, payload)
    listening = [s for s in (signals[type_], event) if s.has_listeners(Event)]
    if not listening and callback is None:
        if measure is not None:
            _after_commit(measure)
        return  # nobody hears it: build nothing
    evt = Event(type_, turn_id, conversation_id, payload)

    def send() -> None:
        if measure is not None:
            measure()
        for signal in listening:
            for _receiver, result in signal.send_robust(sender=Event, event=evt):
                if isinstance(result, Exception):
                    logger.error("event receiver failed for %s: %r", type_, result)
        if callback is not None:
            try:
                callback(evt)
            except Exception:  # a callback must not break the turn
                logger.exception("on_event callback failed for %s", type_)

    _after_commit(send)


def _after_commit(send: Callable[[], object]) -> None:
    if transaction.get_connection().in_atomic_block:
        transaction.on_commit(send)
    else:
        send()  # what on_commit does outside a transaction, without its bookkeeping
