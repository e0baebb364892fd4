"""Content parts of messages: what a transcript holds and what a model request carries.

Parts are frozen dataclasses with a ``kind`` literal. They are stored in ``Message.content`` as a
JSON list through one ``TypeAdapter`` (``dump_parts`` / ``load_parts``), so the storage boundary is
the only place where JSON turns into types.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from typing import Annotated, Any, Literal

from django.db import models
from pydantic import Field, TypeAdapter

from .base.serialization import MAX_DEPTH, JsonObject, storable_text

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
    #: An assistant message of ``Turn.paint``: :class:`ImagePart` only.
    IMAGE = "image"
    #: An assistant message of ``Turn.view_media``: one :class:`MediaAnalysisPart`.
    MEDIA_ANALYSIS = "media_analysis"
    #: A snapshot of the dynamic part of the system prompt, kept in the history for clients that
    #: want it there (prompt caching).
    DYNAMIC_CONTEXT = "dynamic_context"


#: The kind of dynamic context snapshots (``MessageKind.DYNAMIC_CONTEXT``).
DYNAMIC_CONTEXT = MessageKind.DYNAMIC_CONTEXT
#: Message kinds that are for the provider only (dynamic context): no ``message.created`` event
#: reports them (the event stream reaches end users) and cursor reads for applications leave
#: them out.
PRIVATE_MESSAGE_KINDS = frozenset({DYNAMIC_CONTEXT})
#: Part kinds that are for the provider only (reasoning, opaque replay data): cursor reads for
#: applications leave them out.
PRIVATE_PART_KINDS = frozenset({"thinking", "provider"})


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
    #: The id the model gave this call when another call of the same response had it: the call
    #: got ``id`` instead and is refused, not run. (A call reusing an id of an earlier response
    #: gets a fresh ``id`` and runs; see :func:`distinct_call_ids`.)
    duplicate_of: str | None = None
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


@dataclass(frozen=True)
class ImagePart:
    """A generated image: a provider URL and/or a file in a Django storage, never its bytes.

    ``id`` names the image within the conversation (tools may refer to it); ``storage`` is the
    alias of the storage holding ``name`` (``"default"`` for ``default_storage``).
    """

    id: str
    mime_type: str = "image/png"
    url: str | None = None
    storage: str | None = None
    name: str | None = None
    prompt: str = ""
    revised_prompt: str | None = None
    kind: Literal["image"] = "image"


@dataclass(frozen=True)
class MediaAnalysisPart:
    """What a model found in images or documents: its text, structured data and the media's
    description (name, MIME type, size, digest), never the media's bytes."""

    text: str
    objective: str = ""
    data: Any = None
    media: tuple[dict[str, Any], ...] = ()
    kind: Literal["media_analysis"] = "media_analysis"


Part = Annotated[
    TextPart | ThinkingPart | ToolCallPart | ToolResultPart | DataPart | ProviderPart
    | ImagePart | MediaAnalysisPart,
    Field(discriminator="kind"),
]

#: Message kinds of the media operations (``Turn.paint`` and ``Turn.view_media``): assistant
#: messages a tool records between its call and its result; model requests see them as text
#: (:func:`turnkit_django.runtime.media_projection.project_media`).
MEDIA_KINDS = frozenset({MessageKind.IMAGE, MessageKind.MEDIA_ANALYSIS})

_parts_adapter: TypeAdapter[list[Part]] = TypeAdapter(list[Part])


def dump_parts(parts: Iterable[Part]) -> list[JsonObject]:
    """Serialize parts to the JSON stored in ``Message.content``."""
    return _parts_adapter.dump_python(list(parts), mode="json")


def load_parts(content: object) -> list[Part]:
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

    @cached_property
    def call_ids(self) -> frozenset[str]:
        """The ids of the message's tool calls (computed once per message object)."""
        return frozenset(p.id for p in self.parts if isinstance(p, ToolCallPart))

    @cached_property
    def size(self) -> int:
        """Characters of the parts as JSON (what the context's token estimate counts); computed
        once per message object (the transcript cache reuses them from turn to turn)."""
        return len(json.dumps(dump_parts(self.parts), default=str))


_ID_CHARS = re.compile(r"[^A-Za-z0-9_-]")

#: The longest tool-call id and tool name a call keeps: the width of the
#: ``ToolExecution.tool_call_id`` and ``tool_name`` columns (PostgreSQL refuses longer values,
#: SQLite would keep them). :func:`distinct_call_ids` bounds what the model sends to it.
CALL_FIELD_LENGTH = 200


#: The deepest nesting of tool-call arguments a call keeps (the store's limit); deeper ones are
#: refused as unreadable.
ARGUMENT_DEPTH = MAX_DEPTH


def _too_deep(value: object) -> bool:
    """Whether ``value`` nests dicts and lists deeper than :data:`ARGUMENT_DEPTH`."""
    level = [value]
    for _ in range(ARGUMENT_DEPTH + 1):
        level = [child for item in level if isinstance(item, dict | list | tuple)
                 for child in (item.values() if isinstance(item, dict) else item)]
        if not level:
            return False
    return True


def _as_text(value: object) -> str:
    """A value too deep to store as data, as the JSON text the model sent (when it has one)."""
    try:
        return json.dumps(value, default=str)
    except (RecursionError, ValueError):
        return f"(a value nested deeper than {ARGUMENT_DEPTH} levels)"


def _well_formed(part: ToolCallPart) -> ToolCallPart:
    """``part`` with the types the runtime relies on, for a client of the application's own
    that built it otherwise: an id or a name that is no str becomes one (an empty id gets a
    fresh one; a name no tool has gets the unknown-tool error), arguments that are no dict
    become raw arguments (the invalid-arguments error), raw arguments that are no str text."""
    if type(part.id) is str and type(part.name) is str and type(part.arguments) is dict \
            and (part.raw_arguments is None or type(part.raw_arguments) is str):
        return part  # the shipped clients' calls: nothing to do
    arguments, raw = part.arguments, part.raw_arguments
    if not isinstance(arguments, dict):
        arguments, raw = {}, raw if raw is not None else _as_text(arguments)
    return replace(part, id=part.id if isinstance(part.id, str) else "",
                   name=part.name if isinstance(part.name, str) else _as_text(part.name),
                   arguments=arguments,
                   raw_arguments=raw if raw is None or isinstance(raw, str) else _as_text(raw))


def distinct_call_ids(parts: Sequence[Part], taken: Iterable[str]) -> tuple[Part, ...]:
    """Give every tool call of ``parts`` (one response) an id no other call has (in ``parts``
    or ``taken``, the ids of earlier responses).

    A call reusing an id of an earlier response gets a fresh id and runs: servers that number
    the calls of each response (``call_0`` in every turn) reuse ids across responses, and
    within the response the call is unambiguous. A call reusing an id of another call in the
    same response keeps the model's id in ``duplicate_of`` (the runtime refuses it with a
    readable error) and gets a fresh id, so each call has exactly one result under an id of
    its own. A call without an id, or with one longer than :data:`CALL_FIELD_LENGTH`, gets a
    fresh one. Ids are compared as stored (a NUL or a lone surrogate replaced): two ids the
    database keeps alike are not distinct.

    A name longer than :data:`CALL_FIELD_LENGTH` is cut to it: no tool has such a name (tool
    names have at most 64 characters), so the call still gets the unknown-tool error, which the
    model reads, and the same call is stored on every database. Arguments or structured output
    nested deeper than :data:`ARGUMENT_DEPTH` are kept as text: invalid arguments, or output
    that fails its schema (the model is asked again), instead of a turn the store cannot write.
    """
    earlier = taken if isinstance(taken, (set, frozenset)) else set(taken)
    given: set[str] = set()  # the model's ids in this response
    mine: set[str] = set()  # the ids this response's calls end up with
    out: list[Part] = []
    for part in parts:
        if isinstance(part, DataPart) and _too_deep(part.data):
            part = replace(part, data=_as_text(part.data))  # fails an output schema: a retry
        if not isinstance(part, ToolCallPart):
            out.append(part)
            continue
        part = _well_formed(part)
        if len(part.name) > CALL_FIELD_LENGTH:
            part = replace(part, name=part.name[:CALL_FIELD_LENGTH])
        if part.raw_arguments is None and _too_deep(part.arguments):
            # Deeper than the store serializes: a tool error the model reads, not a failed turn.
            part = replace(part, arguments={}, raw_arguments=_as_text(part.arguments))
        original = part.id
        if original and storable_text(original) != original:
            # Compared and kept as stored: "a\x00" and "a\ufffd" are one id in the database.
            part = replace(part, id=storable_text(original))
        if (not original or len(original) > CALL_FIELD_LENGTH or original in given
                or part.id in earlier or part.id in mine):
            base = _ID_CHARS.sub("_", original)[:48] or "call"
            n = 2
            while f"{base}_{n}" in mine or f"{base}_{n}" in earlier:
                n += 1
            part = replace(part, id=f"{base}_{n}",
                           duplicate_of=original if original and original in given else None)
        if original:
            given.add(original)
        mine.add(part.id)
        out.append(part)
    return tuple(out)


def text_of(parts: Sequence[Part]) -> str:
    """Concatenate the text parts."""
    return "".join(p.text for p in parts if isinstance(p, TextPart))


__all__ = [
    "CALL_FIELD_LENGTH",
    "DYNAMIC_CONTEXT",
    "MEDIA_KINDS",
    "PRIVATE_MESSAGE_KINDS",
    "PRIVATE_PART_KINDS",
    "ChatMessage",
    "DataPart",
    "ImagePart",
    "MediaAnalysisPart",
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
    "distinct_call_ids",
    "dump_parts",
    "load_parts",
    "text_of",
]
