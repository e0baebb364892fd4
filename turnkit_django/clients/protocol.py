"""The model client protocol and the values that cross it.

A client turns a :class:`ModelRequest` into a :class:`ModelResponse`. It is called with no
database transaction open and no lock held; it may take as long as the provider needs. It raises
:class:`~turnkit_django.exceptions.ModelError` (or ``ModelAccessError``) for failures retrying
will not fix, after doing its own retries for transient ones.
"""

from __future__ import annotations

import importlib
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar, Literal, Protocol, runtime_checkable

from ..base.serialization import JsonMapping, JsonObject
from ..conf.deltas import ChunkCallback
from ..exceptions import ModelAccessError
from ..messages import ChatMessage, Part, PartsView, ThinkingPart

#: Set by :func:`turnkit_django.testing.block_model_requests`: real provider clients refuse to
#: make requests while it is set.
requests_blocked = threading.Event()


def json_int(value: object) -> int:
    """Return an integer read from JSON (a token or call count); 0 when missing or empty."""
    return int(value) if isinstance(value, int | float | str) and value else 0


@dataclass(frozen=True)
class Usage:
    """Token counts of one or more model responses.

    ``thinking_tokens`` is the part of ``output_tokens`` the model spent reasoning, when the
    provider reports it (providers bill it as output); it is not added to ``total_tokens``.
    ``image_input_tokens`` counts image tokens that image models price apart from text input
    (``gpt-image-1`` edits); chat models count images they read in ``input_tokens``.
    """

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0
    thinking_tokens: int = 0
    image_input_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_tokens
            + self.cache_write_tokens
            + self.image_input_tokens
        )

    def __add__(self, other: Usage) -> Usage:
        return Usage(
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_tokens + other.cache_read_tokens,
            self.cache_write_tokens + other.cache_write_tokens,
            self.thinking_tokens + other.thinking_tokens,
            self.image_input_tokens + other.image_input_tokens,
        )

    def as_dict(self) -> dict[str, int]:
        data = {
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cache_read_tokens": self.cache_read_tokens,
            "cache_write_tokens": self.cache_write_tokens,
            "thinking_tokens": self.thinking_tokens,
        }
        if self.image_input_tokens:  # only image models have them: keep other records as they were
            data["image_input_tokens"] = self.image_input_tokens
        return data

    @classmethod
    def from_dict(cls, data: object) -> Usage:
        """Read a stored usage record (``as_dict``); a missing or malformed one counts 0."""
        record: JsonMapping = data if isinstance(data, Mapping) else {}
        return cls(**{k: json_int(record.get(k)) for k in cls.__dataclass_fields__})


@dataclass(frozen=True)
class ToolSpec:
    """A tool as the model sees it: a name, a description and a JSON schema for its arguments.

    ``parameters`` is shared between requests (it is built once per tool): clients must treat it
    as read-only and copy it before changing anything.
    """

    name: str
    description: str
    parameters: JsonObject


@dataclass(frozen=True)
class ModelRequest:
    """Everything a client needs for one model call.

    ``stable_instructions`` never changes between requests of the same agent configuration (so
    providers can cache it); ``dynamic_instructions`` holds the parts that may change per request.
    """

    model: str
    messages: tuple[ChatMessage, ...]
    tools: tuple[ToolSpec, ...] = ()
    stable_instructions: str = ""
    dynamic_instructions: str = ""
    output_schema: JsonObject | None = None
    thinking: JsonObject | None = None
    max_tokens: int | None = None
    metadata: JsonObject = field(default_factory=dict)

    @property
    def instructions(self) -> str:
        return "\n\n".join(p for p in (self.stable_instructions, self.dynamic_instructions) if p)

    @property
    def tool_names(self) -> list[str]:
        return [t.name for t in self.tools]

    @property
    def last_message(self) -> ChatMessage | None:
        return self.messages[-1] if self.messages else None

    def last_message_is_user(self) -> bool:
        """Return whether the newest message is user input (not a tool result)."""
        last = self.last_message
        return last is not None and last.role == "user"

    def last_message_is_tool_result(self) -> bool:
        last = self.last_message
        return last is not None and last.role == "tool"

    def with_changes(self, **changes: Any) -> ModelRequest:
        return replace(self, **changes)


@dataclass(frozen=True)
class ModelResponse(PartsView):
    """One model response: its parts (text, thinking, tool calls, data) and usage."""

    parts: tuple[Part, ...]
    usage: Usage = field(default_factory=Usage)
    model: str = ""
    stop_reason: str | None = None
    provider: str | None = None
    # Provider-reported cost in USD, when the provider tells it (OpenRouter does).
    reported_cost: str | None = None
    # False when the provider's response carried no usage at all (a gateway, a mock): ``usage``
    # is then zero tokens that were never counted, and the call's cost is unknown, not zero.
    usage_reported: bool = True

    @property
    def thinking(self) -> list[ThinkingPart]:
        return [p for p in self.parts if isinstance(p, ThinkingPart)]


#: What a client may declare it can do, each as a ``supports_<capability>`` class flag (the
#: defaults are :class:`BaseClient`'s). Read them with :func:`supports`, never by sniffing methods.
Capability = Literal[
    "thinking", "structured_output", "prompt_caching", "paint", "view_media", "streaming",
]


def supports(client: object, capability: Capability) -> bool:
    """Whether ``client`` declares ``capability``: its ``supports_<capability>`` flag is ``True``
    (a client without the flag, such as a plain :class:`Client`, declares nothing)."""
    return getattr(client, f"supports_{capability}", False) is True


@runtime_checkable
class Client(Protocol):
    """What the runtime needs from a model client."""

    #: Name used to tag provider-specific parts (thinking signatures) for verbatim replay.
    provider: str

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Return the model's response to ``request`` or raise ``ModelError``."""
        ...


class BaseClient:
    """Optional base class for clients: capability flags and the real-request switch.

    Media capabilities are declared, never sniffed: a client with ``supports_paint`` implements
    ``paint(ImageRequest) -> ImageResult``, one with ``supports_view_media`` implements
    ``view_media(MediaRequest) -> MediaAnalysis`` (see :mod:`turnkit_django.clients.media`).
    """

    provider: str = "custom"
    #: Real provider clients make network requests; ``block_model_requests()`` stops them.
    makes_network_requests: ClassVar[bool] = False
    supports_thinking: ClassVar[bool] = False
    supports_structured_output: ClassVar[bool] = True
    supports_prompt_caching: ClassVar[bool] = False
    supports_paint: ClassVar[bool] = False
    supports_view_media: ClassVar[bool] = False
    #: Implements ``stream(request, on_chunk)``: the response ``complete`` would return, built
    #: from a provider stream, with ``on_chunk(kind, text)`` called for each text or tool-argument
    #: chunk as it arrives (see :mod:`turnkit_django.conf.deltas`).
    supports_streaming: ClassVar[bool] = False
    #: Wants the dynamic part of the prompt as ``dynamic_context`` messages in the history, so
    #: its instructions stay byte-stable for the provider's prefix cache.
    dynamic_context_in_history: ClassVar[bool] = False
    #: The SDK module the client imports on first use and the extra that installs it, or None.
    sdk: ClassVar[tuple[str, str] | None] = None

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise NotImplementedError

    def stream(self, request: ModelRequest, on_chunk: ChunkCallback) -> ModelResponse:
        """The response to ``request``, calling ``on_chunk`` as it arrives; without streaming
        support, the whole response at once and no chunks."""
        return self.complete(request)

    def missing_sdk(self) -> str | None:
        """What to install before this client can make a request (for system checks), or None."""
        if self.sdk is None:
            return None
        module, extra = self.sdk
        try:
            importlib.import_module(module)
        except ImportError:
            return f"{type(self).__name__} needs the {module} SDK: pip install '{extra}'"
        return None

    def _guard_network(self) -> None:
        if self.makes_network_requests and requests_blocked.is_set():
            raise ModelAccessError(
                f"{type(self).__name__} tried a real model request while "
                "turnkit_django.testing.block_model_requests() is active; use ScriptedClient "
                "or FunctionClient in tests"
            )


__all__ = ["BaseClient", "Client", "ModelRequest", "ModelResponse", "ToolSpec", "Usage",
           "json_int", "requests_blocked"]
