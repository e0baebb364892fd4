"""Content parts of messages: what a transcript holds and what a model request carries.

Parts are frozen dataclasses with a ``kind`` literal. They are stored in ``Message.content`` as a
JSON list through one ``TypeAdapter`` (``dump_parts`` / ``load_parts``), so the storage boundary is
the only place where JSON turns into types.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Any, Literal

from django.db import models
from pydantic import Field, TypeAdapter

Role = Literal["user", "assistant", "tool"]


class MessageRole(models.TextChoices):
    USER = "user"
    ASSISTANT = "assistant"
    TOOL = "tool"


class MessageKind(models.TextChoices):
    """What a stored message is (``Message.kind``)."""

    TEXT = "text"
    TOOL_CALL = "tool_call"
    TOOL_RESULT = "tool_result"
    CONTEXT_SUMMARY = "context_summary"


@dataclass(frozen=True)
class TextPart:
    text: str
    kind: Literal["text"] = "text"


@dataclass(frozen=True)
class ThinkingPart:
    """Model reasoning; replayed verbatim (with its signature) to the provider that produced it."""

    text: str
    signature: str | None = None
    provider: str | None = None
    redacted: bool = False
    kind: Literal["thinking"] = "thinking"


@dataclass(frozen=True)
class ToolCallPart:
    id: str
    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    # Raw argument text when the model sent something that is not a JSON object.
    raw_arguments: str | None = None
    kind: Literal["tool_call"] = "tool_call"


@dataclass(frozen=True)
class ToolResultPart:
    tool_call_id: str
    name: str
    content: Any
    is_error: bool = False
    kind: Literal["tool_result"] = "tool_result"


@dataclass(frozen=True)
class DataPart:
    """Structured output returned by the model for an output schema."""

    data: Any
    kind: Literal["data"] = "data"


@dataclass(frozen=True)
class ProviderPart:
    """An opaque block a provider needs back verbatim (replayed only to the same provider)."""

    provider: str
    data: dict[str, Any]
    kind: Literal["provider"] = "provider"


Part = Annotated[
    TextPart | ThinkingPart | ToolCallPart | ToolResultPart | DataPart | ProviderPart,
    Field(discriminator="kind"),
]

_parts_adapter: TypeAdapter[list[Part]] = TypeAdapter(list[Part])


def dump_parts(parts: Iterable[Part]) -> list[dict[str, Any]]:
    """Serialize parts to the JSON stored in ``Message.content``."""
    return _parts_adapter.dump_python(list(parts), mode="json")


def load_parts(content: Any) -> list[Part]:
    """Parse stored JSON back into parts."""
    return _parts_adapter.validate_python(content or [])


class PartsView:
    """Read access shared by everything that holds ``parts``: messages and model responses."""

    parts: tuple[Part, ...]

    @property
    def text(self) -> str:
        return text_of(self.parts)

    @property
    def tool_calls(self) -> list[ToolCallPart]:
        return [p for p in self.parts if isinstance(p, ToolCallPart)]

    @property
    def tool_results(self) -> list[ToolResultPart]:
        return [p for p in self.parts if isinstance(p, ToolResultPart)]

    @property
    def output_data(self) -> Any:
        """The structured output of the message, if it has any."""
        return next((p.data for p in self.parts if isinstance(p, DataPart)), None)


@dataclass(frozen=True)
class ChatMessage(PartsView):
    """One message as the model sees it."""

    role: Role
    parts: tuple[Part, ...]
    kind: str = "text"
    sequence: int | None = None
    # Stored message metadata the runtime reads back (a context summary's replaced range).
    metadata: dict[str, Any] = field(default_factory=dict)


def text_of(parts: Sequence[Part]) -> str:
    """Concatenate the text parts."""
    return "".join(p.text for p in parts if isinstance(p, TextPart))


__all__ = [
    "ChatMessage",
    "DataPart",
    "MessageKind",
    "MessageRole",
    "Part",
    "PartsView",
    "ProviderPart",
    "Role",
    "TextPart",
    "ThinkingPart",
    "ToolCallPart",
    "ToolResultPart",
    "dump_parts",
    "load_parts",
    "text_of",
]
