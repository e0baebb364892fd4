"""The persisted loop state of a turn (``Turn.state``), typed, with its one JSON adapter.

The runtime reads the state once when it claims a turn and writes a new value in the same
transaction as each step it commits, so a replacement worker continues exactly where the last
committed step stopped. Values are frozen: a step builds the next state with :meth:`replace`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Annotated, Any

from pydantic import Field, GetCoreSchemaHandler, TypeAdapter
from pydantic_core import core_schema

from ..base.serialization import JsonObject, JsonValue
from ..base.states import Phase
from ..exceptions import BudgetExceeded
from .rows import copied


class _AsStored:
    """Marks a field's JSON to pass through the adapter as stored: turnkit wrote it, and
    checking every nested value would cost more than the rest of the state on each step."""

    @staticmethod
    def __get_pydantic_core_schema__(source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        return core_schema.any_schema()


_STORED = _AsStored()
StoredValue = Annotated[JsonValue, _STORED]
StoredObject = Annotated[JsonObject, _STORED]


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
        if not isinstance(data, dict) or not data.keys() >= {"reason", "limit"}:
            raise ValueError("a stored reservation is 'granted' or an object with a reason and "
                             f"a limit, not {data!r}")
        return cls(False, str(data["reason"]), str(data["limit"]))

    @classmethod
    def __get_pydantic_core_schema__(cls, source: Any, handler: GetCoreSchemaHandler
                                     ) -> core_schema.CoreSchema:
        return core_schema.no_info_plain_validator_function(
            cls.from_json,
            serialization=core_schema.plain_serializer_function_ser_schema(cls.as_json))


GRANTED = Reservation(True)


@dataclass(frozen=True)
class Candidate:
    """The output the turn would publish: the last response's text and structured data."""

    text: str = ""
    data: StoredValue = None


@dataclass(frozen=True)
class Terminal:
    """The terminal tool call that ended the tool batch, and the output it gives the turn."""

    tool: str
    call_id: str = ""
    text: str = ""
    data: StoredValue = None


def _is_none(value: object) -> bool:
    return value is None


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
    message_id: Annotated[str | None, Field(exclude_if=_is_none)] = None
    error: Annotated[StoredObject | None, Field(exclude_if=_is_none)] = None

    def replace(self, **changes: Any) -> MediaCall:
        return replace(self, **changes)


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
    audits: tuple[StoredObject, ...] = ()
    judged: Mapping[str, tuple[StoredObject, ...]] = field(default_factory=dict)
    #: The message giving an application wait's joined results to the turn (given once).
    joined_message_id: str | None = None
    #: The media calls made for the turn (by key): intents and outcomes, never their bytes.
    media: Mapping[str, MediaCall] = field(default_factory=dict)
    #: The one call that may run after the response that exhausted the spend limit.
    budget_completion_call_id: str | None = None
    #: Assessment metadata set for the current candidate (reset by every new model response).
    output_metadata: StoredObject | None = None
    #: Structured evaluation receipts, by receipt id (see runtime.evaluations).
    evaluations: Mapping[str, StoredObject] = field(default_factory=dict)
    #: The tools each tool source (an MCP server) offered when the turn started, by source
    #: name: ``{"tools": [...]}`` or, when listing failed, ``{"tools": [], "error": text}``.
    listed_tools: Mapping[str, StoredObject] = field(default_factory=dict)

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
        """The stored form: ``phase`` and each field that differs from a fresh state's."""
        data = _adapter.dump_python(self, mode="json")
        return {key: value for key, value in data.items()
                if key == "phase" or value != _FRESH[key]}

    @classmethod
    def from_json(cls, data: Mapping[str, Any] | None) -> TurnState:
        """Load a stored state; a missing key has its field's default. Invalid stored state
        raises pydantic's ``ValidationError`` (a ``ValueError``) naming the field."""
        return _adapter.validate_python(data or {})


_adapter: TypeAdapter[TurnState] = TypeAdapter(TurnState)
#: A fresh state's stored form: ``as_json`` leaves out the fields that still equal it.
_FRESH: JsonObject = _adapter.dump_python(TurnState(), mode="json")


__all__ = ["GRANTED", "Candidate", "MediaCall", "Reservation", "Terminal", "TurnState"]
