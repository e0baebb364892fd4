"""Durable events: rows of the event table, written in the transaction of the fact they report.

A worker's events (the messages it appends, the status changes it makes) travel with its step:
inside the step's one statement on the fast path, or in the same atomic block otherwise (see
:class:`~.fenced.Fenced`). Application controls write theirs under the tree lock with
:func:`record_event`. Every event of a tree is therefore written while the tree lock is held, so
the event id (from one sequence) grows in commit order within a tree: it is the tree's cursor.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import NotRequired, TypedDict

from ..base.serialization import JsonMapping, json_safe
from ..messages import PRIVATE_MESSAGE_KINDS
from ..models import Event, Message
from .rows import new_row

#: How much of a message's text an event carries (the transcript holds the rest).
TEXT_LIMIT = 2000

#: The event a worker's status change writes, by transition name.
TRANSITION_EVENTS = {
    "publish": "turn.completed",
    "fail": "turn.failed",
    "suspend": "turn.waiting",
    "hand_back": "turn.handed_back",
    "pause_at_boundary": "turn.paused",
    "await_approval": "turn.paused",
    "await_child": "turn.paused",
}


def stamp(moment: datetime) -> str:
    """``moment`` as stored in JSON: UTC, microseconds always written, so stamps sort as text."""
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")


class CalledTool(TypedDict):
    """A tool call a message makes, as its event names it."""

    id: str
    name: str


class ToolOutcome(TypedDict):
    """A tool result a message gives, as its event names it."""

    id: str
    name: str
    is_error: bool


class MessagePayload(TypedDict):
    """The payload of a ``message.created`` event."""

    message_id: str
    role: str
    kind: str
    text: str
    tool_calls: NotRequired[list[CalledTool]]
    tool_results: NotRequired[list[ToolOutcome]]


def build_event(root_id: str, turn_id: str, conversation_id: str, type_: str,
                payload: JsonMapping | None = None) -> Event:
    """An unsaved event row."""
    return new_row(Event, root_turn_id=root_id, turn_id=turn_id,
                   conversation_id=conversation_id, type=type_,
                   payload=json_safe(payload or {}))


def message_payload(message: Message) -> MessagePayload:
    """What a ``message.created`` event says about ``message``: ids, role, kind, its text
    (cut at :data:`TEXT_LIMIT`) and the tools it calls; never provider-only parts."""
    texts: list[str] = []
    calls: list[CalledTool] = []
    results: list[ToolOutcome] = []
    for part in message.content or []:
        kind = part.get("kind")
        if kind == "text":
            texts.append(str(part.get("text") or ""))
        elif kind == "tool_call":
            calls.append({"id": part.get("id"), "name": part.get("name")})
        elif kind == "tool_result":
            results.append({"id": part.get("tool_call_id"),
                            "name": part.get("name"), "is_error": bool(part.get("is_error"))})
    payload: MessagePayload = {"message_id": message.pk, "role": message.role,
                               "kind": message.kind, "text": "\n".join(texts)[:TEXT_LIMIT]}
    if calls:
        payload["tool_calls"] = calls
    if results:
        payload["tool_results"] = results
    return payload


def message_events(root_id: str, turn_id: str, messages: Sequence[Message]) -> list[Event]:
    """The ``message.created`` events of ``messages``: none for a private kind (dynamic
    context), which the event stream would show to end users."""
    return [build_event(root_id, m.turn_id or turn_id, m.conversation_id, "message.created",
                        message_payload(m)) for m in messages
            if m.kind not in PRIVATE_MESSAGE_KINDS]


def record_event(root_id: str, turn_id: str, conversation_id: str, type_: str,
                 payload: JsonMapping | None = None) -> Event:
    """Write one event now (the caller holds the tree lock of ``root_id``)."""
    event = build_event(root_id, turn_id, conversation_id, type_, payload)
    event.save(force_insert=True)
    return event


__all__ = ["TEXT_LIMIT", "TRANSITION_EVENTS", "CalledTool", "MessagePayload", "ToolOutcome",
           "build_event", "message_events", "message_payload", "record_event", "stamp"]
