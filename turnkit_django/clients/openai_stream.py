"""Streaming for :class:`~turnkit_django.clients.openai.OpenAIClient`: ``"stream": true`` (with
``stream_options.include_usage``) and the server-sent chunks read through httpx.

Text (``delta.content``, and a refusal), reasoning and tool-call argument deltas are assembled
into the body a plain call would have returned (usage from the final chunk, when the server sends
one), which the same ``parse_response`` translates: the committed message is identical. Each text
and tool-argument chunk is handed on as it arrives. A server that ignores ``"stream"`` and answers
one JSON body (some proxies and local runtimes do) is read as a plain call, its text one chunk.

Failures before the stream starts (status, connection) are retried as plain calls are. A stream
that ends before its ``finish_reason`` / ``[DONE]``, a chunk that is not JSON, or an error chunk
mid-stream is a :class:`~turnkit_django.exceptions.ModelError` (retryable, except an error whose
type says the request itself is wrong), and nothing of the partial response is returned.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

import httpx

from ..base.serialization import JsonObject
from ..conf.deltas import ChunkCallback
from ..exceptions import ModelError, ModelRateLimited
from . import _wire
from ._http import content_text, error_message, member, members, provider_error, retry_after
from .protocol import ModelRequest, ModelResponse

_STREAM_OPTIONS = {"stream": True, "stream_options": {"include_usage": True}}


class _Broken(Exception):
    """The stream broke after it started: the error to raise."""

    def __init__(self, error: ModelError) -> None:
        self.error = error


class OpenAIStreaming:
    """Mixin of ``OpenAIClient``: ``stream(request, on_chunk)``."""

    supports_streaming = True
    timeout: float
    max_retries: int
    backoff: float
    max_backoff: float
    _sleep: Callable[[float], None]

    if TYPE_CHECKING:
        def _ready(self) -> str | None: ...

        def _url(self, path: str) -> str: ...

        def _label(self) -> str: ...

        def _secrets(self) -> tuple[str, ...]: ...

        def _client(self) -> httpx.Client: ...

        def _headers(self, key: str | None, *, json_body: bool = True) -> dict[str, str]: ...

        def _status_error(self, response: httpx.Response) -> ModelError: ...

        def build_request(self, request: ModelRequest) -> _wire.OpenAIChatBody: ...

        def parse_response(self, data: JsonObject, request: ModelRequest) -> ModelResponse: ...

    def stream(self, request: ModelRequest, on_chunk: ChunkCallback) -> ModelResponse:
        """Send ``request`` as a stream; ``on_chunk(kind, text)`` for each text / tool-argument
        chunk; return the response a plain ``complete`` would."""
        key = self._ready()
        body: JsonObject = {**self.build_request(request), **_STREAM_OPTIONS}  # type: ignore[dict-item]
        headers = {**self._headers(key), "Accept": "text/event-stream"}
        attempts = max(self.max_retries, 0) + 1
        attempt = 0
        while True:
            outcome, delay = self._stream_once(body, headers, on_chunk)
            if isinstance(outcome, dict):
                return self.parse_response(outcome, request)
            attempt += 1
            if not outcome.retryable or attempt == attempts or outcome.status == 200:
                raise outcome
            self._sleep(delay)

    def _stream_once(self, body: JsonObject, headers: dict[str, str], on_chunk: ChunkCallback,
                     ) -> tuple[JsonObject | ModelError, float]:
        """One attempt: the assembled body, or the error (status 200: the stream had started,
        not retried here) and the delay before the next attempt."""
        delay = self.backoff
        try:
            with self._client().stream("POST", self._url("/chat/completions"), json=body,
                                       headers=headers, timeout=self.timeout) as response:
                if not response.is_success:
                    response.read()
                    error = self._status_error(response)
                    wait = retry_after(response.headers)
                    if error.retryable and response.status_code in (429, 529):
                        error = ModelRateLimited(str(error), status=response.status_code,
                                                 retry_after=wait)
                    return error, delay if wait is None else min(wait, self.max_backoff)
                if "json" in response.headers.get("content-type", "").lower():
                    return _unstreamed(response, on_chunk, self), 0.0
                try:
                    return _assemble(_events(response.iter_lines()), on_chunk, self), 0.0
                except _Broken as broken:
                    return broken.error, 0.0
        except httpx.TransportError as exc:
            text = f"could not stream from {self._label()} ({type(exc).__name__})"
            return ModelError(text, retryable=True), delay


def _unstreamed(response: httpx.Response, on_chunk: ChunkCallback,
                client: OpenAIStreaming) -> JsonObject | ModelError:
    """A server that ignored ``"stream": true`` answered one JSON body: that body is the
    response (checked by ``parse_response`` as a plain call's is), its text one chunk."""
    response.read()
    try:
        data = response.json()
    except ValueError:
        data = None
    if not isinstance(data, dict):
        return ModelError(f"{client._label()} answered a stream request with JSON that is not "
                          "an object; check the base URL points at a chat completions API",
                          status=200, retryable=False)
    message = member(next(iter(members(data.get("choices"))), {}), "message")
    text = content_text(message.get("content"))
    if text:
        on_chunk("text", text)
    for call in members(message.get("tool_calls")):
        arguments = member(call, "function").get("arguments")
        if isinstance(arguments, str) and arguments:
            on_chunk("tool_arguments", arguments)
    return data


def _events(lines: Iterator[str]) -> Iterator[str]:
    """The ``data`` of each server-sent event (comments and other fields skipped)."""
    data: list[str] = []
    for line in lines:
        if not line:
            if data:
                yield "\n".join(data)
                data = []
        elif line.startswith("data:"):
            data.append(line[5:].removeprefix(" "))
    if data:
        yield "\n".join(data)


def _assemble(events: Iterator[str], on_chunk: ChunkCallback,
              client: OpenAIStreaming) -> JsonObject:
    """Read the chunks into the body of a plain chat completion."""
    def broken(what: str, retryable: bool = True) -> _Broken:
        return _Broken(ModelError(f"the stream from {client._label()} {what}", status=200,
                                  retryable=retryable))

    message: dict[str, Any] = {"role": "assistant"}
    texts: dict[str, list[str]] = {"content": [], "refusal": [], "reasoning_content": []}
    calls: dict[int, dict[str, Any]] = {}
    data: JsonObject = {}
    finish: str | None = None
    done = False
    for event in events:
        if event.strip() == "[DONE]":
            done = True
            break
        try:
            chunk = json.loads(event)
        except ValueError:
            raise broken("sent a chunk that is not JSON; send the request again") from None
        if not isinstance(chunk, dict):
            raise broken("sent a chunk that is not a JSON object")
        if "error" in chunk:
            kind, text = provider_error(chunk)
            final = "invalid_request" in (kind or "")
            raise _Broken(ModelError(error_message(
                f"the stream from {client._label()}", None, kind, text, client._secrets()),
                status=200, retryable=not final))
        for key in ("id", "model", "usage", "system_fingerprint"):
            if chunk.get(key) is not None:
                data[key] = chunk[key]
        for choice in members(chunk.get("choices"))[:1]:
            delta = member(choice, "delta")
            for field in texts:
                piece = content_text(delta.get(field) or (
                    delta.get("reasoning") if field == "reasoning_content" else None))
                if piece:
                    texts[field].append(piece)
                    if field != "reasoning_content":
                        on_chunk("text", piece)
            for part in members(delta.get("tool_calls")):
                index = part.get("index")
                call = calls.setdefault(index if isinstance(index, int) else len(calls),
                                        {"type": "function", "arguments": []})
                function = member(part, "function")
                for field, value in (("id", part.get("id")), ("name", function.get("name"))):
                    if isinstance(value, str) and value:
                        call[field] = value
                arguments = function.get("arguments")
                if isinstance(arguments, str) and arguments:
                    call["arguments"].append(arguments)
                    on_chunk("tool_arguments", arguments)
            if choice.get("finish_reason"):
                finish = str(choice["finish_reason"])
    if finish is None and not done:
        raise broken("ended before its finish_reason; send the request again")
    message["content"] = "".join(texts["content"]) or None
    for field in ("refusal", "reasoning_content"):
        if texts[field]:
            message[field] = "".join(texts[field])
    if calls:
        message["tool_calls"] = [
            {"id": c.get("id"), "type": "function",
             "function": {"name": c.get("name"), "arguments": "".join(c["arguments"])}}
            for _, c in sorted(calls.items())]
    return {**data, "choices": [{"index": 0, "message": message, "finish_reason": finish}]}


__all__ = ["OpenAIStreaming"]
