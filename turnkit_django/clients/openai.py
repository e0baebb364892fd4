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

The translation both ways is :class:`~turnkit_django.clients.openai_chat.OpenAIChat`.
Images and vision (``paint``, ``view_media``) are in :mod:`turnkit_django.clients.openai_media`;
a user message carrying ``ProviderPart(provider="openai")`` blocks (image or file parts) is sent
as a list of content parts, its text first.

Usage: ``prompt_tokens`` counts cached tokens too, so they are subtracted from ``input_tokens`` and
reported as ``cache_read_tokens``; the two add up to the prompt and are priced at their own rates.

429, 5xx, timeouts and connection errors are retried with exponential backoff, honouring
``Retry-After`` / ``retry-after-ms``. ``sleep`` is injectable so tests never wait.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from typing import Literal

import httpx

from ..exceptions import ModelAccessError
from . import openai_media
from ._http import (
    check_options,
    client_secrets,
    retry_after,
    safe_url,
    split_userinfo,
)
from .media import ImageRequest, ImageResult, MediaAnalysis, MediaRequest
from .openai_chat import PROVIDER, OpenAIChat
from .openai_chat import STOP_REASONS as STOP_REASONS  # importable from here, as before
from .openai_http import API_KEY_ENV, OpenAIHTTP
from .openai_stream import OpenAIStreaming
from .protocol import BaseClient, ModelRequest, ModelResponse

DEFAULT_BASE_URL = "https://api.openai.com/v1"
BASE_URL_ENV = "OPENAI_BASE_URL"


class OpenAIClient(OpenAIStreaming, OpenAIChat, OpenAIHTTP, BaseClient):
    """A :class:`~turnkit_django.clients.Client` for OpenAI-compatible chat completions.

    The key is required for ``api.openai.com`` only: local servers (Ollama, vLLM, LM Studio)
    are called without an ``Authorization`` header when no key is configured. ``model`` pins
    every request to one model; without it the request's model is used.
    """

    provider = PROVIDER
    makes_network_requests = True
    supports_structured_output = True
    supports_prompt_caching = True  # automatic on the provider's side
    supports_paint = True
    supports_view_media = True
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
        image_model: str = openai_media.DEFAULT_IMAGE_MODEL,
        image_timeout: float = 300.0,
    ) -> None:
        check_options("OpenAIClient", locals())
        self.model = model
        self.timeout = timeout
        self.max_retries = max_retries
        self.backoff = backoff
        self.max_backoff = max_backoff
        self.organization = organization
        self.max_tokens = max_tokens
        self.max_tokens_field = max_tokens_field
        self.strict_output = strict_output
        self.image_model = image_model
        self.image_timeout = image_timeout
        self._base_url = base_url
        self._api_key = api_key
        self._transport = transport
        self._http_client = http_client
        self._extra_headers = dict(extra_headers or {})
        self._sleep = sleep
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        return f"OpenAIClient(model={self.model!r}, base_url={safe_url(self.base_url)!r})"

    # -- configuration -----------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        return (self._base_url or os.environ.get(BASE_URL_ENV) or DEFAULT_BASE_URL).rstrip("/")

    def _label(self) -> str:
        if self.base_url == DEFAULT_BASE_URL:
            return "OpenAI"
        return f"OpenAI-compatible API at {safe_url(self.base_url)}"

    def _key(self) -> str | None:
        return self._api_key or os.environ.get(API_KEY_ENV) or None

    def _url(self, path: str) -> str:
        """Return the URL of the endpoint ``path`` (``"/chat/completions"``) under base_url.

        A query string in base_url (``?api-version=...``) is kept after the path; its userinfo
        is sent as a header instead (see ``split_userinfo``).
        """
        base = split_userinfo(self.base_url)[0]
        try:
            url = httpx.URL(base)
        except httpx.InvalidURL:
            return base + path  # the request reports the invalid base_url
        return str(url.copy_with(path=url.path.rstrip("/") + path))

    def _secrets(self) -> tuple[str, ...]:
        """Every credential this client holds: removed from any error text (see ``redact``)."""
        return client_secrets(self._key(), self._extra_headers, self.base_url)

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

    def _headers(self, key: str | None, *, json_body: bool = True) -> dict[str, str]:
        headers = {"Accept": "application/json"}
        if json_body:  # a multipart body brings its own Content-Type with the boundary
            headers["Content-Type"] = "application/json"
        if key:
            headers["Authorization"] = f"Bearer {key}"
        headers.update(split_userinfo(self.base_url)[1])  # as httpx did: it replaces the key
        if self.organization:
            headers["OpenAI-Organization"] = self.organization
        headers.update(self._extra_headers)
        return headers

    # -- the request -------------------------------------------------------------------------

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to ``{base_url}/chat/completions`` and translate the answer."""
        key = self._ready()
        body = self.build_request(request)
        data = self._post(self._url("/chat/completions"), key, json=body)
        return self.parse_response(data, request)

    def paint(self, request: ImageRequest) -> ImageResult:
        """Generate (``/images/generations``) or edit (``/images/edits``) images."""
        return openai_media.paint(self, request)

    def view_media(self, request: MediaRequest) -> MediaAnalysis:
        """Analyse images and PDFs through chat completions with image and file parts."""
        return openai_media.view_media(self, request)

    def _ready(self) -> str | None:
        """Check the network switch and the credentials; return the key (None: a local server)."""
        self._guard_network()
        missing = self.missing_credentials()
        if missing:
            raise ModelAccessError(missing)
        return self._key()


__all__ = ["OpenAIClient", "retry_after"]
