"""Append every turnkit event to a JSON-lines file: an example of listening to turnkit's signals.

Enabled by ``settings.EXAMPLE_EVENT_LOG`` (the demo sets it, so its timeline can show what each
worker did). Events are sent after the transaction that made the fact commits; each line adds
the process id and, for turn and tool events, the fence and attempt the row had at that moment.
"""

from __future__ import annotations

import json
import os
from typing import Any

from django.conf import settings

from turnkit_django.events import Event
from turnkit_django.models import ToolExecution, Turn


def record(sender: Any, event: Event, **kwargs: Any) -> None:
    """Receiver for ``turnkit_django.events.event``."""
    row: dict[str, Any] | None = None
    if event.type.startswith("turn."):
        row = Turn.objects.filter(pk=event.turn_id).values(
            "agent_name", "fence", "recovery_attempts").first()
    elif event.type.startswith("tool_call."):
        row = ToolExecution.objects.filter(
            turn_id=event.turn_id, tool_call_id=event.payload.get("id")
        ).values("id", "attempts", "result", "error").first()
    entry = {"at": event.created_at.timestamp(), "pid": os.getpid(), "type": event.type,
             "turn_id": event.turn_id, "payload": event.payload, "row": row or {}}
    with open(settings.EXAMPLE_EVENT_LOG, "a", encoding="utf-8") as log:
        log.write(json.dumps(entry, default=str) + "\n")
