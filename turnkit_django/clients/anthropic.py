"""Claude through the official ``anthropic`` SDK (the Messages API).

How a transcript becomes a request:

- ``stable_instructions`` is the first system block, marked ``cache_control: ephemeral`` (so tools
  and the stable prompt are cached); ``dynamic_instructions`` is a second, uncached block. With
  ``prompt_caching`` the request also carries the top-level ``cache_control`` marker, which caches
  the conversation up to its last block for the next step of the loop.
- ``tool`` messages become ``user`` messages of ``tool_result`` blocks; consecutive messages of the
  same API role are merged, so all results of one assistant turn travel in one user message.
- Assistant thinking produced by this provider is replayed verbatim (text and signature); a
  redacted block is stored as ``ThinkingPart(redacted=True, signature=<its data>)``. Thinking from
  other providers is dropped. Blocks this client has no part type for are kept as
  ``ProviderPart(provider="anthropic")`` and replayed as they came.
- ``view_media`` sends one user message of ``image`` / ``document`` blocks (base64 bytes or a URL
  source) followed by the objective, through the same Messages API call.
- Structured output uses ``output_config.format`` (a JSON schema); the JSON text stays in the
  transcript as text (so replay is byte-identical) and its parsed value is added as a ``DataPart``.

The SDK retries 429, 5xx, timeouts and connection errors itself (``max_retries``); failures that
remain become :class:`~turnkit_django.exceptions.ModelError`. Error messages carry the provider's
error type and message only, never a credential (the key, headers, base_url: ``client_secrets``).

The translation both ways is :class:`~turnkit_django.clients.anthropic_messages.AnthropicMessages`.
"""

from __future__ import annotations

import os
import threading
from typing import Any

from ..exceptions import ConfigurationError, ModelAccessError, ModelError, ModelRateLimited
from ..messages import (
    ProviderPart,
)
from ._http import (
    check_options,
    client_secrets,
    error_message,
    json_object,
    provider_error,
    retry_after,
    safe_url,
    split_userinfo,
)
from .anthropic_media import media_block
from .anthropic_messages import PROVIDER, AnthropicMessages
from .anthropic_stream import AnthropicStreaming, sdk_arguments
from .media import MediaAnalysis, MediaRequest, analysis_from, analysis_request
from .protocol import BaseClient, ModelRequest, ModelResponse

API_KEY_ENV = "ANTHROPIC_API_KEY"


class AnthropicClient(AnthropicStreaming, AnthropicMessages, BaseClient):
    """A :class:`~turnkit_django.clients.Client` for Claude models through the Messages API.

    ``model`` pins every request of this client to one model; without it the request's model
    (the agent's, or ``TURNKIT["DEFAULT_MODEL"]``) is used. The SDK client is built on the first
    request, so configuring this client without a key does not fail at startup.
    """

    provider = PROVIDER
    sdk = ("anthropic", "turnkit-django[anthropic]")
    makes_network_requests = True
    supports_thinking = True
    supports_structured_output = True
    supports_prompt_caching = True
    supports_view_media = True

    def __init__(
        self,
        model: str | None = None,
        *,
        api_key: str | None = None,
        base_url: str | None = None,
        timeout: float = 60.0,
        max_retries: int = 2,
        http_client: Any = None,
        max_tokens: int = 4096,
        prompt_caching: bool = True,
        default_headers: dict[str, str] | None = None,
    ) -> None:
        check_options("AnthropicClient", locals())
        self.model = model
        # Read ANTHROPIC_BASE_URL here rather than leave it to the SDK: its credentials must be
        # split into a header and redacted like those of base_url=.
        self.base_url = base_url or os.environ.get("ANTHROPIC_BASE_URL") or None
        self.timeout = timeout
        self.max_retries = max_retries
        self.max_tokens = max_tokens
        self.prompt_caching = prompt_caching
        self._api_key = api_key
        self._http_client = http_client
        self._default_headers = dict(default_headers or {})
        self._sdk_client: Any = None
        self._lock = threading.Lock()

    def __repr__(self) -> str:
        where = safe_url(self.base_url) if self.base_url else None
        return f"AnthropicClient(model={self.model!r}, base_url={where!r})"

    # -- configuration -----------------------------------------------------------------------

    def missing_credentials(self) -> str | None:
        """Return what is missing to make requests (for system checks), or None."""
        if self._api_key or os.environ.get(API_KEY_ENV):
            return None
        return (
            f"no Anthropic API key: set the {API_KEY_ENV} environment variable "
            "or pass AnthropicClient(api_key=...)"
        )

    def _key(self) -> str:
        missing = self.missing_credentials()
        if missing:
            raise ModelAccessError(missing)
        return str(self._api_key or os.environ.get(API_KEY_ENV))

    def _where(self) -> str:
        """The API this client calls, for messages: its base URL without credentials."""
        return safe_url(self.base_url) if self.base_url else "the Anthropic API"

    def _sdk(self) -> Any:
        with self._lock:
            if self._sdk_client is None:
                self._sdk_client = self._build_sdk()
            return self._sdk_client

    def _build_sdk(self) -> Any:
        if needed := self.missing_sdk():
            raise ConfigurationError(needed)
        import anthropic  # noqa: PLC0415 - an optional extra, imported on use

        base_url, credentials = split_userinfo(self.base_url) if self.base_url else (None, {})
        try:
            return anthropic.Anthropic(
                api_key=self._key(), max_retries=self.max_retries, timeout=self.timeout,
                base_url=base_url, http_client=self._http_client,
                default_headers={**credentials, **self._default_headers} or None)
        except TypeError as exc:  # an http_client of the wrong httpx package, for instance
            raise ConfigurationError(f"could not configure the anthropic SDK: {exc}") from None

    # -- the request -------------------------------------------------------------------------

    def complete(self, request: ModelRequest) -> ModelResponse:
        """Send ``request`` to the Messages API and translate the answer."""
        self._guard_network()
        body = self.build_request(request)
        sdk = self._sdk()
        import anthropic  # noqa: PLC0415 - an optional extra, imported on use

        keywords, extra = sdk_arguments(body)
        try:
            raw = sdk.messages.with_raw_response.create(**keywords, extra_body=extra)
        except anthropic.APIError as exc:
            error = self._translate_error(exc)
        else:
            data = json_object(raw.http_response)
            if data is None:
                raise ModelError(f"{self._where()} did not answer with a JSON object")
            return self.parse_response(data, request)
        # Raised outside the except block: the SDK exception (which holds the request and its
        # headers) must not travel along as __context__ into logs and stored errors.
        raise error

    def view_media(self, request: MediaRequest) -> MediaAnalysis:
        """Analyse images and PDFs: image and document blocks, then the objective."""
        parts = [ProviderPart(PROVIDER, media_block(media)) for media in request.media]
        return analysis_from(self.complete(analysis_request(request, parts)))

    def _translate_error(self, exc: Exception) -> ModelError:
        import anthropic  # noqa: PLC0415 - an optional extra, imported on use

        key = self._api_key or os.environ.get(API_KEY_ENV)
        secrets = client_secrets(key, self._default_headers, self.base_url)
        if isinstance(exc, anthropic.APIStatusError):
            status = exc.status_code
            kind, message = provider_error(exc.body)
            request_id = getattr(exc, "request_id", None)
            if isinstance(exc, anthropic.AuthenticationError | anthropic.PermissionDeniedError):
                # The provider's text for a rejected key is left out: some echo part of the key.
                text = error_message(
                    "Anthropic", status, kind, message if status == 403 else None, secrets,
                    hint=f"Check the key in {API_KEY_ENV} (or api_key=) and its permissions",
                    request_id=request_id)
                return ModelAccessError(text, status=status)
            hint = "Check the model name" if status == 404 else ""
            text = error_message("Anthropic", status, kind, message, secrets, hint=hint,
                                 request_id=request_id)
            if status in (429, 529):  # rate limited, overloaded: the runtime waits it out
                return ModelRateLimited(text, status=status,
                                        retry_after=retry_after(exc.response.headers))
            return ModelError(text, status=status, retryable=status in (408, 409) or status >= 500)
        retries = f"after {self.max_retries} retries"
        if isinstance(exc, anthropic.APITimeoutError):
            return ModelError(
                f"Anthropic request timed out (timeout {self.timeout}s) {retries}", retryable=True
            )
        if isinstance(exc, anthropic.APIConnectionError):
            return ModelError(f"could not connect to {self._where()} {retries}", retryable=True)
        return ModelError(error_message("Anthropic", None, type(exc).__name__, None, secrets))


__all__ = ["AnthropicClient"]
