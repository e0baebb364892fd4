"""Streaming for :class:`~turnkit_django.clients.anthropic.AnthropicClient`: the SDK's streaming
interface (``messages.stream``), each text and tool-input chunk handed on as it arrives, and the
final message (``get_final_message``) translated by the same ``parse_response`` as a plain call,
so the committed message is identical.

A stream that ends before ``message_stop``, a chunk that is not JSON, or an ``error`` event mid-
stream is a :class:`~turnkit_django.exceptions.ModelError` (retryable, except for an error event
whose type says the request itself is wrong); nothing of the partial response is returned.
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING, Any

from ..base.serialization import JsonObject
from ..conf.deltas import ChunkCallback
from ..exceptions import ModelError
from . import _wire
from ._http import client_secrets, provider_error, redact
from .protocol import ModelRequest, ModelResponse

#: Parameters every supported SDK version accepts as keywords; newer ones go through extra_body.
SDK_KEYWORDS = frozenset({"model", "max_tokens", "messages", "system", "tools", "thinking"})
#: Error event types that sending the request again will not fix.
_FINAL_ERRORS = frozenset({"invalid_request_error", "authentication_error", "permission_error",
                           "not_found_error", "request_too_large"})


def sdk_arguments(body: _wire.AnthropicBody) -> tuple[dict[str, Any], JsonObject | None]:
    """The SDK's keyword arguments for ``body``, and what goes through ``extra_body``."""
    keywords: dict[str, Any] = {k: v for k, v in body.items() if k in SDK_KEYWORDS}
    extra: JsonObject = {k: v for k, v in body.items()  # type: ignore[misc]
                         if k not in SDK_KEYWORDS}
    return keywords, extra or None


class AnthropicStreaming:
    """Mixin of ``AnthropicClient``: ``stream(request, on_chunk)``."""

    supports_streaming = True
    base_url: str | None
    _api_key: str | None
    _default_headers: dict[str, str]

    if TYPE_CHECKING:
        def _guard_network(self) -> None: ...

        def _sdk(self) -> Any: ...

        def _where(self) -> str: ...

        def build_request(self, request: ModelRequest) -> _wire.AnthropicBody: ...

        def parse_response(self, data: JsonObject, request: ModelRequest) -> ModelResponse: ...

        def _translate_error(self, exc: Exception) -> ModelError: ...

    def stream(self, request: ModelRequest, on_chunk: ChunkCallback) -> ModelResponse:
        """Send ``request`` as a stream; ``on_chunk(kind, text)`` for each text / tool-input
        chunk; return the response a plain ``complete`` would."""
        self._guard_network()
        keywords, extra = sdk_arguments(self.build_request(request))
        sdk = self._sdk()
        import anthropic  # noqa: PLC0415 - an optional extra, imported on use

        error: ModelError
        try:
            with sdk.messages.stream(**keywords, extra_body=extra) as events:
                stopped = False
                for event in events:
                    if event.type == "text" and event.text:
                        on_chunk("text", event.text)
                    elif event.type == "input_json" and event.partial_json:
                        on_chunk("tool_arguments", event.partial_json)
                    elif event.type == "message_stop":
                        stopped = True
                if not stopped:
                    raise _StreamEnded
                final = events.get_final_message()
        except _StreamEnded:
            error = ModelError(f"the stream from {self._where()} ended before its "
                               "message_stop event; send the request again", retryable=True)
        except anthropic.APIStatusError as exc:
            error = self._stream_error(exc) if exc.status_code < 400 else self._translate_error(
                exc)
        except anthropic.APIError as exc:
            error = self._translate_error(exc)
        except ValueError as exc:  # a chunk that is not JSON
            error = ModelError(f"the stream from {self._where()} sent a chunk that is not JSON "
                               f"({type(exc).__name__})", retryable=True)
        except Exception as exc:  # the connection broke while the stream was read
            error = ModelError(f"the stream from {self._where()} broke "
                               f"({type(exc).__name__})", retryable=True)
        else:
            data = final.model_dump(mode="json", exclude_none=True)
            return self.parse_response(data, request)
        # Raised outside the except block: the SDK exception (which holds the request and its
        # headers) must not travel along as __context__ into logs and stored errors.
        raise error

    def _stream_error(self, exc: Exception) -> ModelError:
        """An ``error`` event in a stream that had started (HTTP 200)."""
        kind, message = provider_error(getattr(exc, "body", None))
        text = (f"the stream from {self._where()} carried an error event ({kind or 'error'})"
                f": {(message or '').strip()[:500]}")
        key = self._api_key or os.environ.get("ANTHROPIC_API_KEY")
        secrets = client_secrets(key, self._default_headers, self.base_url)
        return ModelError(redact(text, secrets), retryable=kind not in _FINAL_ERRORS)


class _StreamEnded(Exception):
    """The stream ended before ``message_stop``."""


__all__ = ["SDK_KEYWORDS", "AnthropicStreaming", "sdk_arguments"]
