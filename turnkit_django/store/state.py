"""The persisted loop state of a turn (``Turn.state``), typed, with its one JSON adapter.

The runtime reads the state once when it claims a turn and writes a new value in the same
transaction as each step it commits, so a replacement worker continues exactly where the last
committed step stopped. Values are frozen: a step builds the next state with :meth:`replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from ..exceptions import BudgetExceeded
from ..serialization import JsonObject, JsonValue
from ..states import Phase
from .rows import copied


@dataclass(frozen=True)
class Reservation:
    """The next model call's iteration: granted, or denied with the budget's reason."""

    granted: bool
    reason: str = ""
    limit: str = ""

    @classmethod
    def denied(cls, exc: BudgetExceeded) -> Reservation:
        return cls(False, exc.reason, exc.limit)

    def refuse(self) -> None:
        """Raise the BudgetExceeded a denial stands for."""
        if not self.granted:
            raise BudgetExceeded(self.reason, limit=self.limit)

    def as_json(self) -> JsonValue:
        return "granted" if self.granted else {"reason": self.reason, "limit": self.limit}

    @classmethod
    def from_json(cls, data: JsonValue) -> Reservation:
        if data == "granted":
            return GRANTED
        if not isinstance(data, dict):
            raise ValueError(f"a stored reservation is 'granted' or an object, not {data!r}")
        return cls(False, str(data["reason"]), str(data["limit"]))


GRANTED = Reservation(True)


@dataclass(frozen=True)
class Candidate:
    """The output the turn would publish: the last response's text and structured data."""

    text: str = ""
    data: JsonValue = None


@dataclass(frozen=True)
class Terminal:
    """The terminal tool call that ended the tool batch, and the output it gives the turn."""

    tool: str
    call_id: str
    text: str
    data: JsonValue = None


@dataclass(frozen=True)
class MediaCall:
    """One media call of the turn (``Turn.paint``, ``Turn.view_media``), by its key.

    ``requested`` commits before the paid provider call; ``completed`` (with the message that
    holds the result) or ``failed`` after it; ``refused`` when the budget refused it first.
    """

    op: str
    status: str
    attempts: int = 1
    at: str = ""
    message_id: str | None = None
    error: JsonObject | None = None

    def replace(self, **changes: Any) -> MediaCall:
        return replace(self, **changes)

    def as_json(self) -> JsonObject:
        data: JsonObject = {"op": self.op, "status": self.status, "attempts": self.attempts,
                            "at": self.at}
        if self.message_id is not None:
            data["message_id"] = self.message_id
        if self.error is not None:
            data["error"] = self.error
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> MediaCall:
        return cls(str(data["op"]), str(data["status"]), int(data.get("attempts") or 1),
                   str(data.get("at") or ""), data.get("message_id"), data.get("error"))


@dataclass(frozen=True)
class TurnState:
    phase: Phase = Phase.MODEL
    #: The next model call's iteration, reserved by the transaction entering the model phase.
    reservation: Reservation | None = None
    iterations: int = 0
    #: Tool slots this turn took, in all and by tool name: counted only for a turn whose
    #: agent set limits of its own (a child's ``own_limits`` option; see runtime.budget).
    tool_executions: int = 0
    tool_counts: Mapping[str, int] = field(default_factory=dict)
    candidate: Candidate | None = None
    #: The assistant message holding the response whose tool calls the tools phase runs.
    response_message_id: str | None = None
    terminal: Terminal | None = None
    #: Output-policy revisions asked so far, the audits that asked them, stored judge verdicts.
    revisions: int = 0
    audits: tuple[JsonObject, ...] = ()
    judged: Mapping[str, tuple[JsonObject, ...]] = field(default_factory=dict)
    #: The message giving an application wait's joined results to the turn (given once).
    joined_message_id: str | None = None
    #: The media calls made for the turn (by key): intents and outcomes, never their bytes.
    media: Mapping[str, MediaCall] = field(default_factory=dict)
    #: The one call that may run after the response that exhausted the spend limit.
    budget_completion_call_id: str | None = None
    #: Assessment metadata set for the current candidate (reset by every new model response).
    output_metadata: JsonObject | None = None
    #: Structured evaluation receipts, by receipt id (see runtime.evaluations).
    evaluations: Mapping[str, JsonObject] = field(default_factory=dict)
    #: The tools each tool source (an MCP server) offered when the turn started, by source
    #: name: ``{"tools": [...]}`` or, when listing failed, ``{"tools": [], "error": text}``.
    listed_tools: Mapping[str, JsonObject] = field(default_factory=dict)

    def replace(self, **changes: Any) -> TurnState:
        return copied(self, **changes)

    def counted(self, tool: str) -> TurnState:
        """This state with one more tool slot taken by this turn, for ``tool``."""
        return copied(self, tool_executions=self.tool_executions + 1,
                      tool_counts={**self.tool_counts, tool: self.tool_counts.get(tool, 0) + 1})

    def with_media(self, key: str, call: MediaCall) -> TurnState:
        return copied(self, media={**self.media, key: call})

    # -- the storage boundary ------------------------------------------------------------

    def as_json(self) -> JsonObject:
        data: JsonObject = {"phase": str(self.phase)}
        if self.reservation is not None:
            data["reservation"] = self.reservation.as_json()
        if self.iterations:
            data["iterations"] = self.iterations
        if self.tool_executions:
            data["tool_executions"] = self.tool_executions
        if self.tool_counts:
            data["tool_counts"] = dict(self.tool_counts)
        if self.candidate is not None:
            data["candidate"] = {"text": self.candidate.text, "data": self.candidate.data}
        if self.response_message_id is not None:
            data["response_message_id"] = self.response_message_id
        if self.terminal is not None:
            t = self.terminal
            data["terminal"] = {"tool": t.tool, "call_id": t.call_id, "text": t.text,
                                "data": t.data}
        if self.revisions:
            data["revisions"] = self.revisions
        if self.audits:
            data["audits"] = list(self.audits)
        if self.judged:
            data["judged"] = {key: list(found) for key, found in self.judged.items()}
        if self.joined_message_id is not None:
            data["joined_message_id"] = self.joined_message_id
        if self.media:
            data["media"] = {key: call.as_json() for key, call in self.media.items()}
        if self.budget_completion_call_id is not None:
            data["budget_completion_call_id"] = self.budget_completion_call_id
        if self.output_metadata is not None:
            data["output_metadata"] = self.output_metadata
        if self.evaluations:
            data["evaluations"] = dict(self.evaluations)
        if self.listed_tools:
            data["listed_tools"] = dict(self.listed_tools)
        return data

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> TurnState:
        data = data or {}
        reservation = data.get("reservation")
        candidate = data.get("candidate")
        terminal = data.get("terminal")
        return cls(
            phase=Phase(data.get("phase") or Phase.MODEL),
            reservation=None if reservation is None else Reservation.from_json(reservation),
            iterations=int(data.get("iterations") or 0),
            tool_executions=int(data.get("tool_executions") or 0),
            tool_counts={str(k): int(v) for k, v in (data.get("tool_counts") or {}).items()},
            candidate=None if candidate is None else Candidate(str(candidate.get("text") or ""),
                                                               candidate.get("data")),
            response_message_id=data.get("response_message_id"),
            terminal=None if terminal is None else Terminal(
                str(terminal["tool"]), str(terminal.get("call_id") or ""),
                str(terminal.get("text") or ""), terminal.get("data")),
            revisions=int(data.get("revisions") or 0),
            audits=tuple(data.get("audits") or ()),
            judged={str(k): tuple(v) for k, v in (data.get("judged") or {}).items()},
            joined_message_id=data.get("joined_message_id"),
            media={str(k): MediaCall.from_json(v) for k, v in (data.get("media") or {}).items()},
            budget_completion_call_id=data.get("budget_completion_call_id"),
            output_metadata=data.get("output_metadata"),
            evaluations={str(k): v for k, v in (data.get("evaluations") or {}).items()},
            listed_tools={str(k): v for k, v in (data.get("listed_tools") or {}).items()},
        )


__all__ = ["GRANTED", "Candidate", "MediaCall", "Reservation", "Terminal", "TurnState"]
