"""Test doubles for the model, shipped for users testing their own agents.

``ScriptedClient`` answers from a list, in order; ``FunctionClient`` computes each answer from the
request (deterministic from the transcript, so it works in Celery workers too). ``reply`` and
``call`` build the entries. ``block_model_requests()`` makes every real provider client raise.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..clients.base import BaseClient, ModelRequest, ModelResponse, Usage
from ..clients.base import requests_blocked as _blocked
from ..clients.evaluation import EvaluationRequest, EvaluatorReply
from ..exceptions import ModelError
from ..messages import DataPart, Part, TextPart, ToolCallPart

_call_ids = itertools.count(1)


@dataclass(frozen=True)
class Reply:
    """A final response: text and/or structured data."""

    text: str = ""
    data: Any = None
    usage: dict[str, int] | None = None


@dataclass(frozen=True)
class Call:
    """One tool call in a response."""

    name: str
    arguments: dict[str, Any] = field(default_factory=dict)
    id: str | None = None
    usage: dict[str, int] | None = None
    raw_arguments: str | None = None


Entry = Reply | Call | Sequence[Call] | ModelResponse | BaseException


def reply(text: str = "", *, data: Any = None, usage: dict[str, int] | None = None) -> Reply:
    """A final response with ``text`` (and ``data`` for structured output)."""
    return Reply(text, data, usage)


def call(name: str, *, id: str | None = None, usage: dict[str, int] | None = None,
         raw_arguments: str | None = None, **arguments: Any) -> Call:
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


class ScriptedClient(BaseClient):
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

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.requests.append(request)
            if not self._script:
                raise ModelError(
                    f"ScriptedClient has no response left for request {len(self.requests)} "
                    f"(model {request.model!r}); add more entries to the script"
                )
            entry = self._script.pop(0)
        return to_response(entry, request)


class FunctionClient(BaseClient):
    """Answers each request with ``respond(request)``: a reply, a call, or a list of calls."""

    provider = "function"

    def __init__(self, respond: Callable[[ModelRequest], Entry]) -> None:
        self.respond = respond
        self._lock = threading.Lock()
        self.requests: list[ModelRequest] = []

    def complete(self, request: ModelRequest) -> ModelResponse:
        with self._lock:
            self.requests.append(request)
        return to_response(self.respond(request), request)


class ScriptedEvaluator:
    """An evaluator answering from a script, in order; records every request in ``requests``.

    An entry is the raw answers (``{"safe": {"probability": 0.9}}``), an ``EvaluatorReply``
    (with usage and model), an exception to raise (an ``EvaluationError``), or a callable
    ``(request) -> entry``. Without usage a reply reports one token per four characters.
    """

    def __init__(self, script: Iterable[Any] = (), *, identity: str = "scripted-evaluator",
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
    "Call",
    "FunctionClient",
    "Reply",
    "ScriptedClient",
    "ScriptedEvaluator",
    "block_model_requests",
    "call",
    "reply",
    "requests_blocked",
    "to_response",
    "unblock_model_requests",
]
