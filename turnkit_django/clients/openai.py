"""OpenAI-compatible chat completions over httpx: OpenAI, OpenRouter, vLLM, Ollama, LM Studio.

How a transcript becomes a request (``POST {base_url}/chat/completions``):

- the instructions (stable part first, so the provider's automatic prefix cache can hit) are one
  ``system`` message;
- assistant tool calls carry their arguments as a JSON string; each tool result is its own
  ``tool`` message with the ``tool_call_id`` it answers;
- reasoning returned by some servers (``reasoning_content`` / ``reasoning``) is kept as a
  ``ThinkingPart(provider="openai")`` for the record but never sent back: chat completions has no
  field for it;
- structured output uses ``response_format: {"type": "json_schema", ...}``; the JSON text stays in
  the transcript and its parsed value is added as a ``DataPart``.

Usage: ``prompt_tokens`` counts cached tokens too, so they are subtracted from ``input_tokens`` and
reported as ``cache_read_tokens``; the two add up to the prompt and are priced at their own rates.

429, 5xx, timeouts and connection errors are retried with exponential backoff, honouring
``Retry-After`` / ``retry-after-ms``. ``sleep`` is injectable so tests never wait.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any, Literal

import httpx

from ..exceptions import ModelAccessError, ModelError
from ..messages import ChatMessage, DataPart, Part, TextPart, ThinkingPart, ToolCallPart
from ._http import (
    error_message,
    json_object,
    json_text,
    parse_arguments,
    parse_output,
    provider_error,
    resolve_model,
    retry_after,
    schema_name,
)
from .base import BaseClient, ModelRequest, ModelResponse, Usage

logger = logging.getLogger(__name__)

PROVIDER = "openai"
DEFAULT_BASE_URL = "https://api.openai.com/v1"
API_KEY_ENV = "OPENAI_API_KEY"
BASE_URL_ENV = "OPENAI_BASE_URL"
# finish_reason -> the stop reasons the rest of the package uses (Anthropic's names).
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


class OpenAIClient(BaseClient):
    """A :class:`~turnkit_django.clients.Client` for OpenAI-compatible chat completions.

    The key is required for ``api.openai.com`` only: local servers (Ollama, vLLM, LM Studio)
    are called without an ``Authorization`` header when no key is configured. ``model`` pins
    every request to one model; without it the request's model is used.
    """

    provider = PROVIDER
    makes_network_requests = True
    supports_structured_output = True
    supports_prompt_caching = True  # automatic on the provider's side
    dynamic_context_in_history = True  # keeps that cached prefix byte-stable (issue 16)

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 3,
        backoff: float = 0.5,
        max_backoff: float = 30.0,
        transport: httpx.BaseTransport | None = None,
        http_client: httpx.Client | None = None,
        extra_headers: dict[str, str] | None = None,
        organization: str | None = None,
        max_tokens: int | None = None,
        max_tokens_field: Literal["max_completion_tokens", "max_tokens"] = "max_completion_tokens",
        strict_output: bool = False,
        sleep: Callable[[float], None] = time.sleep,
    ) -> None:
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.organization = organization
        self.max_tokens = max_tokens
        self.max_tokens_field = max_tokens_field
        self.strict_output = strict_output
        self._base_url = base_url
        self._api_key = api_key
        self._transport = transport
        self._http_client = http_client
        self._extra_headers = dict(extra_headers or {})
        self._sleep = sleep
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIClient(model={self.model!r}, base_url={self.base_url!r})"

    # -- configuration -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return (self._base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")

    def _label(self) -> str:
        if self.base_url == DEFAULT_BASE_URL:
            return "OpenAI"
        return f"OpenAI-compatible API at {self.base_url}"

    def _key(self) -> str | None:
        return self._api_key or os.environ.get(API_KEY_ENV) or None

    def missing_credentials(self) -> str | None:
        """Return what is missing to make requests (for system checks), or None."""
        if self._key() or self.base_url != DEFAULT_BASE_URL:
            return None
        return (
            f"no OpenAI API key: set the {API_KEY_ENV} environment variable or pass "
            f"OpenAIClient(api_key=...); for a local server set base_url= or {BASE_URL_ENV}"
        )

    def _client(self) -> httpx.Client:
        with self._lock:
            if self._http_client is None:
                self._http_client = httpx.Client(transport=self._transport, timeout=self.timeout)
            return self._http_client

    def _headers(self, key: str | None) -> dict[str, str]:
        headers = {"Content-Type": "application/json", "Accept": "application/json"}
        if key:
            headers["Authorization"] = f"Bearer {key}"
        if self.organization:
            headers["OpenAI-Organization"] = self.organization
        headers.update(self._extra_headers)
        return headers

    # -- the request -------------------------------------------------------------------------

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to ``{base_url}/chat/completions`` and translate the answer."""
        self._guard_network()
        missing = self.missing_credentials()
        if missing:
            raise ModelAccessError(missing)
        key = self._key()
        body = self.build_request(request)
        data = self._post(f"{self.base_url}/chat/completions", body, key)
        return self.parse_response(data, request)

    def build_request(self, request: ModelRequest) -> dict[str, Any]:
        """Return the JSON body of the chat completions request for ``request``."""
        body: dict[str, Any] = {
            "model": resolve_model(self.model, request, PROVIDER),
            "messages": self._messages(request),
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if request.output_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(request.output_schema),
                    "schema": request.output_schema,
                    "strict": self.strict_output,
                },
            }
        max_tokens = request.max_tokens or self.max_tokens
        if max_tokens:
            body[self.max_tokens_field] = max_tokens
        effort = (request.thinking or {}).get("effort")
        if effort:
            body["reasoning_effort"] = effort
        return body

    def _post(self, url: str, body: dict[str, Any], key: str | None) -> dict[str, Any]:
        client = self._client()
        headers = self._headers(key)
        attempts = max(self.max_retries, 0) + 1
        attempt = 0
        while True:
            outcome, delay = self._attempt(client, url, body, headers, key, attempt)
            if not isinstance(outcome, ModelError):
                return outcome
            attempt += 1
            if not outcome.retryable or attempt == attempts:
                break
            logger.info(
                "%s: retrying in %.2fs (attempt %d of %d): %s",
                self._label(),
                delay,
                attempt + 1,
                attempts,
                outcome,
            )
            self._sleep(delay)
        # Raised outside any except block, so no transport exception rides along as __context__.
        raise outcome

    def _attempt(
        self,
        client: httpx.Client,
        url: str,
        body: dict[str, Any],
        headers: dict[str, str],
        key: str | None,
        attempt: int,
    ) -> tuple[dict[str, Any] | ModelError, float]:
        """Make one HTTP attempt; return the response body, or the error and the retry delay."""
        backoff = min(self.backoff * 2**attempt, self.max_backoff)
        try:
            response = client.post(url, json=body, headers=headers, timeout=self.timeout)
        except httpx.TimeoutException:
            text = f"{self._label()} request timed out (timeout {self.timeout}s)"
            return ModelError(text, retryable=True), backoff
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            return ModelError(f"invalid base_url {self.base_url!r}: {exc}"), 0.0
        except httpx.TransportError as exc:
            text = f"could not connect to {self._label()} ({type(exc).__name__})"
            return ModelError(text, retryable=True), backoff
        if response.is_success:
            data = json_object(response)
            if data is not None:
                return data, 0.0
            text = f"{self._label()} did not answer with a JSON object; is base_url a /v1 endpoint?"
            return ModelError(text, status=response.status_code), 0.0
        delay = retry_after(response.headers)
        error = self._status_error(response, key)
        return error, backoff if delay is None else min(delay, self.max_backoff)

    def _status_error(self, response: httpx.Response, key: str | None) -> ModelError:
        status = response.status_code
        try:
            body = response.json()
        except ValueError:
            body = None
        kind, message = provider_error(body)
        if status in (401, 403):
            # OpenAI's text for a wrong key quotes part of it: leave the provider's message out.
            text = error_message(
                self._label(),
                status,
                kind,
                None,
                key,
                hint=f"Check the key in {API_KEY_ENV} (or api_key=) and the organization",
            )
            return ModelAccessError(text, status=status)
        hint = "Check the model name" if status == 404 else ""
        text = error_message(self._label(), status, kind, message, key, hint=hint)
        transient = status in (408, 409, 429) or status >= 500
        # An exhausted quota is a 429 too, but waiting does not fix it.
        return ModelError(
            text, status=status, retryable=transient and "insufficient_quota" not in (kind or "")
        )

    # -- transcript translation --------------------------------------------------------------

    def _messages(self, request: ModelRequest) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        if request.instructions:
            out.append({"role": "system", "content": request.instructions})
        for message in request.messages:
            if message.role == "tool":
                out.extend(
                    {
                        "role": "tool",
                        "tool_call_id": r.tool_call_id,
                        "content": json_text(r.content),
                    }
                    for r in message.tool_results
                )
            elif message.role == "assistant":
                entry = self._assistant_message(message)
                if entry is not None:
                    out.append(entry)
            else:
                text = _text(message.parts)
                if text:
                    out.append({"role": "user", "content": text})
        return out

    @staticmethod
    def _assistant_message(message: ChatMessage) -> dict[str, Any] | None:
        text = _text(message.parts)
        calls = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.raw_arguments
                    if call.raw_arguments is not None
                    else json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in message.tool_calls
        ]
        if not text and not calls:
            return None
        entry: dict[str, Any] = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = calls
        return entry

    # -- the response ------------------------------------------------------------------------

    def parse_response(self, data: dict[str, Any], request: ModelRequest) -> ModelResponse:
        """Translate a chat completions response body into a :class:`ModelResponse`."""
        choices = data.get("choices") if isinstance(data, dict) else None
        if not choices:
            kind, text = provider_error(data)
            raise ModelError(
                error_message(self._label(), None, kind, text or "no choices", self._key())
            )
        choice = choices[0]
        message = choice.get("message") or {}
        parts: list[Part] = []
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            parts.append(ThinkingPart(text=reasoning, provider=PROVIDER))
        content = message.get("content")
        if isinstance(content, list):  # some servers answer with content parts
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
        if content:
            parts.append(TextPart(content))
        refusal = message.get("refusal")
        if refusal:
            parts.append(TextPart(refusal))
        for call in message.get("tool_calls") or []:
            function = call.get("function") or {}
            raw = function.get("arguments")
            if isinstance(raw, dict):  # a few servers send an object instead of a string
                arguments, raw_text = raw, None
            else:
                arguments, raw_text = parse_arguments(raw)
            parts.append(
                ToolCallPart(
                    id=str(call.get("id") or f"call_{uuid.uuid4().hex[:24]}"),
                    name=str(function.get("name")),
                    arguments=arguments,
                    raw_arguments=raw_text,
                )
            )
        if request.output_schema is not None and content and not refusal:
            ok, value = parse_output(content)
            if ok:
                parts.append(DataPart(value))
        finish = choice.get("finish_reason")
        return ModelResponse(
            parts=tuple(parts),
            usage=_usage(data.get("usage") or {}),
            model=str(data.get("model") or request.model),
            stop_reason="refusal" if refusal else STOP_REASONS.get(finish, finish),
            provider=PROVIDER,
            reported_cost=_reported_cost(data.get("usage") or {}),
        )


def _text(parts: tuple[Part, ...]) -> str:
    """Return the text of a message: its text parts, or else its data as JSON."""
    text = "".join(p.text for p in parts if isinstance(p, TextPart))
    if text:
        return text
    return "".join(json_text(p.data) for p in parts if isinstance(p, DataPart))


def _usage(usage: dict[str, Any]) -> Usage:
    details = usage.get("prompt_tokens_details") or {}
    completion = usage.get("completion_tokens_details") or {}
    cached = int(details.get("cached_tokens") or 0)
    written = int(details.get("cache_write_tokens") or 0)
    prompt = int(usage.get("prompt_tokens") or 0)
    return Usage(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=int(usage.get("completion_tokens") or 0),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        thinking_tokens=int(completion.get("reasoning_tokens") or 0),  # part of the output
    )


def _reported_cost(usage: dict[str, Any]) -> str | None:
    cost = usage.get("cost")  # OpenRouter reports what it charged
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        return str(cost)
    return None


__all__ = ["OpenAIClient", "retry_after"]
