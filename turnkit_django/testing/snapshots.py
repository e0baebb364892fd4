"""Snapshots of the rows the invariant checker reads: only the fields it checks."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from ..base.serialization import JsonObject, JsonValue
from ..base.states import TERMINAL_TURN_STATUSES

_TERMINAL = frozenset(str(s) for s in TERMINAL_TURN_STATUSES)


@dataclass(frozen=True)
class TurnRow:
    id: str
    conversation_id: str
    status: str
    fence: int
    fence_log: JsonValue
    state: JsonValue
    completed_at: datetime | None
    error: JsonValue
    claimed_by: str

    FIELDS = ("id", "conversation_id", "status", "fence", "fence_log", "state", "completed_at",
              "error", "claimed_by")

    @property
    def terminal(self) -> bool:
        return self.status in _TERMINAL

    @property
    def phase(self) -> JsonValue:
        return self.state.get("phase") if isinstance(self.state, dict) else None

    def revocations(self) -> list[JsonObject]:
        log = self.fence_log if isinstance(self.fence_log, list) else []
        return [e for e in log if isinstance(e, dict)]


@dataclass(frozen=True)
class MessageRow:
    id: str
    conversation_id: str
    sequence: int
    role: str
    turn_id: str | None
    fence: int | None
    tool_execution_id: str | None
    metadata: JsonValue
    content: JsonValue
    kind: str

    FIELDS = ("id", "conversation_id", "sequence", "role", "turn_id", "fence",
              "tool_execution_id", "metadata", "content", "kind")

    def part_ids(self, kind: str, key: str) -> list[str]:
        if not isinstance(self.content, list):
            return []
        return [str(p.get(key)) for p in self.content
                if isinstance(p, dict) and p.get("kind") == kind]

    @property
    def calls(self) -> list[str]:
        return self.part_ids("tool_call", "id")

    @property
    def results(self) -> list[str]:
        return self.part_ids("tool_result", "tool_call_id")


@dataclass(frozen=True)
class ExecutionRow:
    id: str
    turn_id: str
    tool_call_id: str
    status: str
    fence: int | None

    FIELDS = ("id", "turn_id", "tool_call_id", "status", "fence")


@dataclass(frozen=True)
class DeliveryRow:
    id: str
    destination_conversation_id: str
    message_id: str | None
    delivered_at: datetime | None

    FIELDS = ("id", "destination_conversation_id", "message_id", "delivered_at")


__all__ = ["DeliveryRow", "ExecutionRow", "MessageRow", "TurnRow"]
