"""Test doubles for the model, shipped for users testing their own agents.

``ScriptedClient`` answers from a list, in order; ``FunctionClient`` computes each answer from the
request (deterministic from the transcript, so it works in Celery workers too). ``reply`` and
``call`` build the entries. ``FunctionMediaClient`` answers ``paint`` and ``view_media``.
``block_model_requests()`` makes every real provider client raise.
``InMemoryDispatcher`` (and its pytest fixture ``turnkit_dispatcher``) keeps submitted turns in
memory instead of sending them to Celery, and runs them in the test process on request
(:mod:`turnkit_django.testing.dispatcher`).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import struct
import threading
import zlib
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import TypeVar

from ..base.serialization import JsonObject, JsonValue
from ..clients.evaluation import EvaluationRequest, EvaluatorReply
from ..clients.media import GeneratedImage, ImageRequest, ImageResult, MediaAnalysis, MediaRequest
from ..clients.protocol import BaseClient, ModelRequest, ModelResponse, Usage
from ..clients.protocol import requests_blocked as _blocked
from ..exceptions import ModelError
from ..messages import DataPart, Part, TextPart, ToolCallPart
from .chunks import Answer, Chunked
from .dispatcher import WORKER_ENTRY as WORKER_ENTRY  # importable from here, as before
from .dispatcher import InMemoryDispatcher, in_memory_dispatcher

_call_ids = itertools.count(1)
_Request = TypeVar("_Request", ImageRequest, MediaRequest)
_Result = TypeVar("_Result", ImageResult, MediaAnalysis)


@dataclass(frozen=True)
class Reply:
    """A final response: text and/or structured data."""

    text: str = ""
    data: JsonValue = None
    usage: dict[str, int] | None = None
    chunks: int = 1  # streamed as this many text chunks, delay seconds apart (chunks.py)
    delay: float = 0.0


@dataclass(frozen=True)
class Call:
    """One tool call in a response."""

    name: str
    arguments: JsonObject = field(default_factory=dict)
    id: str | None = None
    usage: dict[str, int] | None = None
    raw_arguments: str | None = None


Entry = Reply | Call | Sequence[Call] | ModelResponse | BaseException


def reply(text: str = "", *, data: JsonValue = None, usage: dict[str, int] | None = None,
          chunks: int = 1, delay: float = 0.0) -> Reply:
    """A final response with ``text`` (and ``data`` for structured output); streamed as
    ``chunks`` text chunks ``delay`` seconds apart."""
    return Reply(text, data, usage, chunks, delay)


def call(name: str, *, id: str | None = None, usage: dict[str, int] | None = None,
         raw_arguments: str | None = None, **arguments: JsonValue) -> Call:
    """A response that calls tool ``name`` with ``arguments``."""
    return Call(name, arguments, id, usage, raw_arguments)


def _estimate(text: str) -> int:
    return max(1, len(text) // 4)


def _estimate_usage(request: ModelRequest, output: str) -> Usage:
    prompt = request.instructions + "".join(
        json.dumps([str(p) for p in m.parts]) for m in request.messages
    )
    return Usage(input_tokens=_estimate(prompt), output_tokens=_estimate(output))


def to_response(entry: Entry, request: ModelRequest) -> ModelResponse:
    """Turn a scripted entry into a ModelResponse (raising it if it is an exception)."""
    if isinstance(entry, BaseException):
        raise entry
    if isinstance(entry, ModelResponse):
        return entry
    calls: list[Call]
    usage_given: dict[str, int] | None
    parts: list[Part] = []
    if isinstance(entry, Reply):
        if entry.text:
            parts.append(TextPart(entry.text))
        if entry.data is not None:
            parts.append(DataPart(entry.data))
        usage_given = entry.usage
        rendered = entry.text + (json.dumps(entry.data) if entry.data is not None else "")
    else:
        calls = [entry] if isinstance(entry, Call) else list(entry)
        if not calls:
            raise ValueError("a scripted response needs at least one call")
        for item in calls:
            parts.append(ToolCallPart(item.id or f"call_{next(_call_ids)}", item.name,
                                      dict(item.arguments), item.raw_arguments))
        usage_given = next((c.usage for c in calls if c.usage), None)
        rendered = json.dumps([[c.name, c.arguments] for c in calls], default=str)
    usage = Usage.from_dict(usage_given) if usage_given else _estimate_usage(request, rendered)
    stop = "tool_use" if any(isinstance(p, ToolCallPart) for p in parts) else "end_turn"
    return ModelResponse(tuple(parts), usage, request.model, stop, "scripted")


def _answer(entry: Entry, request: ModelRequest) -> Answer:
    chunks, delay = (entry.chunks, entry.delay) if isinstance(entry, Reply) else (1, 0.0)
    return to_response(entry, request), chunks, delay


class ScriptedClient(Chunked, BaseClient):
    """Answers requests from a script, in order; records every request in ``requests``."""

    provider = "scripted"

    def __init__(self, script: Iterable[Entry] = ()) -> None:
        self._script = list(script)
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    def add(self, *entries: Entry) -> ScriptedClient:
        with self._lock:
            self._script.extend(entries)
        return self

    @property
    def remaining(self) -> int:
        return len(self._script)

    def _answer(self, request: ModelRequest) -> Answer:
        with self._lock:
            self.requests.append(request)
            if not self._script:
                raise ModelError(
                    f"ScriptedClient has no response left for request {len(self.requests)} "
                    f"(model {request.model!r}); add more entries to the script"
                )
            entry = self._script.pop(0)
        return _answer(entry, request)


class FunctionClient(Chunked, BaseClient):
    """Answers each request with ``respond(request)``: a reply, a call, or a list of calls."""

    provider = "function"

    def __init__(self, respond: Callable[[ModelRequest], Entry]) -> None:
        self.respond = respond
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    def _answer(self, request: ModelRequest) -> Answer:
        with self._lock:
            self.requests.append(request)
        return _answer(self.respond(request), request)


def _png() -> bytes:
    """A valid 1x1 PNG (one red pixel)."""

    def chunk(kind: bytes, data: bytes) -> bytes:
        return (struct.pack(">I", len(data)) + kind + data
                + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header)
            + chunk(b"IDAT", zlib.compress(b"\x00\xff\x00\x00")) + chunk(b"IEND", b""))


#: The image ``FunctionMediaClient`` paints unless told otherwise: a 1x1 PNG.
PNG = _png()


def _default_paint(request: ImageRequest) -> ImageResult:
    return ImageResult(images=(GeneratedImage(data=PNG),),
                       model=request.model or "test-image",
                       usage=Usage(input_tokens=_estimate(request.prompt), output_tokens=272),
                       provider="function", size=request.size)


def _default_view(request: MediaRequest) -> MediaAnalysis:
    names = ", ".join(m.name or m.mime_type for m in request.media)
    return MediaAnalysis(text=f"Looked at {names} for: {request.objective}",
                         data={} if request.output_schema is not None else None,
                         model=request.model or "test-vision",
                         usage=Usage(input_tokens=_estimate(request.objective) + 85,
                                     output_tokens=12), provider="function")


class FunctionMediaClient(BaseClient):
    """A media client for tests: ``paint`` and ``view_media`` answered by functions.

    ``paint(request) -> ImageResult`` defaults to one 1x1 PNG (:data:`PNG`);
    ``view_media(request) -> MediaAnalysis`` to a sentence naming the media and the objective
    (and ``{}`` as data with an output schema). A function may raise, or return an exception to
    raise. Every request is kept in ``requests``. It answers no chat requests.
    """

    provider = "function"
    supports_paint = True
    supports_view_media = True

    def __init__(self,
                 paint: Callable[[ImageRequest], ImageResult | BaseException] | None = None,
                 view_media: Callable[[MediaRequest], MediaAnalysis | BaseException] | None = None
                 ) -> None:
        self._paint = paint or _default_paint
        self._view = view_media or _default_view
        self._lock = threading.Lock()
        self.requests: list[ImageRequest | MediaRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        raise ModelError("FunctionMediaClient answers paint and view_media only; give the agent "
                         "a ScriptedClient or FunctionClient for chat")

    def paint(self, request: ImageRequest) -> ImageResult:
        return self._answer(request, self._paint)

    def view_media(self, request: MediaRequest) -> MediaAnalysis:
        return self._answer(request, self._view)

    def _answer(self, request: _Request, function: Callable[[_Request], _Result | BaseException]
                ) -> _Result:
        with self._lock:
            self.requests.append(request)
        result = function(request)
        if isinstance(result, BaseException):
            raise result
        return result


class ScriptedEvaluator:
    """An evaluator answering from a script, in order; records every request in ``requests``.

    An entry is the raw answers (``{"safe": {"probability": 0.9}}``), an ``EvaluatorReply``
    (with usage and model), an exception to raise (an ``EvaluationError``), or a callable
    ``(request) -> entry``. Without usage a reply reports one token per four characters.
    """

    def __init__(self, script: Iterable[object] = (), *, identity: str = "scripted-evaluator",
                 model: str = "scripted") -> None:
        self.identity = identity
        self.model = model
        self._script = list(script)
        self._lock = threading.Lock()
        self.requests: list[EvaluationRequest] = []
        self.slept: list[float] = []

    def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)  # the runtime's backoff between attempts: never waits

    def evaluate(self, request: EvaluationRequest) -> EvaluatorReply:
        with self._lock:
            self.requests.append(request)
            if not self._script:
                raise ModelError(f"ScriptedEvaluator has no answer left for request "
                                 f"{len(self.requests)}; add more entries to the script")
            entry = self._script.pop(0)
        if callable(entry) and not isinstance(entry, BaseException):
            entry = entry(request)
        if isinstance(entry, BaseException):
            raise entry
        if isinstance(entry, EvaluatorReply):
            return entry
        text = json.dumps(entry, default=str)
        usage = Usage(input_tokens=_estimate(json.dumps(request.candidate, default=str)),
                      output_tokens=_estimate(text))
        return EvaluatorReply(entry, usage, self.model, 200)


def requests_blocked() -> bool:
    return _blocked.is_set()


class block_model_requests(contextlib.ContextDecorator):
    """Make real provider clients raise: as a context manager, decorator, or plain call.

    ``block_model_requests()`` called on its own (for example in a ``conftest.py``) blocks for
    the rest of the process; ``unblock_model_requests()`` undoes it.
    """

    def __init__(self) -> None:
        self._was = _blocked.is_set()
        _blocked.set()

    def __enter__(self) -> block_model_requests:
        _blocked.set()
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._was:
            _blocked.clear()


def unblock_model_requests() -> None:
    _blocked.clear()


__all__ = [
    "PNG",
    "Call",
    "FunctionClient",
    "FunctionMediaClient",
    "InMemoryDispatcher",
    "Reply",
    "ScriptedClient",
    "ScriptedEvaluator",
    "block_model_requests",
    "call",
    "in_memory_dispatcher",
    "reply",
    "requests_blocked",
    "to_response",
    "unblock_model_requests",
]
try:  # the fixture exists where pytest does
    from .dispatcher import turnkit_dispatcher
except ImportError:  # pragma: no cover - pytest is not installed in production
    pass
else:
    __all__ += ["turnkit_dispatcher"]
