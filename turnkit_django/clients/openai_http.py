"""The HTTP side of :class:`~turnkit_django.clients.openai.OpenAIClient`: one POST, retried.

A JSON body (chat completions, image generations) or a multipart form (image edits). 429, 5xx,
timeouts and connection errors are retried with exponential backoff, honouring ``Retry-After``
/ ``retry-after-ms``; a paid request whose answer may be lost (``retry_read_timeouts=False``)
is retried only when the provider cannot have taken it. Errors carry the provider's error type
and message only, never a credential: the key, secret-looking headers and the userinfo and
query of ``base_url`` are removed, also from a body that echoes them.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, TypedDict

import httpx

from ..base.serialization import JsonMapping, JsonObject
from ..exceptions import ModelAccessError, ModelError, ModelRateLimited
from ._http import error_message, json_object, provider_error, redact, retry_after, safe_url

logger = logging.getLogger("turnkit_django.clients.openai")

API_KEY_ENV = "OPENAI_API_KEY"
#: A multipart form's file parts: (field, (file name, bytes, MIME type)).
Files = list[tuple[str, tuple[str, bytes, str]]]


class _PostOptions(TypedDict, total=False):
    """The keyword arguments of one ``httpx.Client.post``: a JSON body or a multipart form."""

    headers: dict[str, str]
    timeout: float
    json: JsonMapping | None
    data: dict[str, str] | None
    files: Files


class OpenAIHTTP:
    """Mixin of ``OpenAIClient``: POST with retries and the mapping of failures to errors."""

    timeout: float
    max_retries: int
    backoff: float
    max_backoff: float
    _sleep: Callable[[float], None]

    if TYPE_CHECKING:
        @property
        def base_url(self) -> str: ...

        def _label(self) -> str: ...

        def _secrets(self) -> tuple[str, ...]: ...

        def _client(self) -> httpx.Client: ...

        def _headers(self, key: str | None, *, json_body: bool = True) -> dict[str, str]: ...

    def _post(
        self,
        url: str,
        key: str | None,
        *,
        json: JsonMapping | None = None,
        data: dict[str, str] | None = None,
        files: Files | None = None,
        headers: dict[str, str] | None = None,
        timeout: float | None = None,
        retry_read_timeouts: bool = True,
    ) -> JsonObject:
        """POST a JSON body (``json``) or a multipart form (``data`` and ``files``), retrying.

        ``retry_read_timeouts=False`` is for paid requests that may have been carried out when
        the answer timed out (image generation): only failures before the provider took the
        request are retried then.
        """
        client = self._client()
        sent = {**self._headers(key, json_body=files is None), **(headers or {})}
        options: _PostOptions = {"headers": sent, "timeout": timeout or self.timeout}
        if files is None:
            options["json"] = json
        else:
            options["data"], options["files"] = data, files
        attempts = max(self.max_retries, 0) + 1
        attempt = 0
        while True:
            outcome, delay = self._attempt(client, url, options, attempt, retry_read_timeouts)
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
        options: _PostOptions,
        attempt: int,
        retry_read_timeouts: bool,
    ) -> tuple[JsonObject | ModelError, float]:
        """Make one HTTP attempt; return the response body, or the error and the retry delay."""
        backoff = min(self.backoff * 2**attempt, self.max_backoff)
        try:
            response = client.post(url, **options)
        except (httpx.ConnectTimeout, httpx.PoolTimeout):
            text = f"{self._label()} request timed out before it was sent"
            return ModelError(text, retryable=True), backoff
        except httpx.TimeoutException:
            text = f"{self._label()} request timed out (timeout {options['timeout']}s)"
            return ModelError(text, retryable=retry_read_timeouts), backoff
        except (httpx.UnsupportedProtocol, httpx.InvalidURL) as exc:
            text = f"invalid base_url {safe_url(self.base_url)}: {exc}"
            return ModelError(redact(text, self._secrets())), 0.0
        except httpx.TransportError as exc:
            text = f"could not connect to {self._label()} ({type(exc).__name__})"
            retryable = retry_read_timeouts or isinstance(exc, httpx.ConnectError)
            return ModelError(text, retryable=retryable), backoff
        if response.is_success:
            data = json_object(response)
            if data is not None:
                return data, 0.0
            text = f"{self._label()} did not answer with a JSON object; is base_url a /v1 endpoint?"
            return ModelError(text, status=response.status_code), 0.0
        delay = retry_after(response.headers)
        error = self._status_error(response)
        if error.retryable and response.status_code in (429, 529):
            # Rate limited: if the retries here run out, the runtime waits the rest.
            error = ModelRateLimited(str(error), status=response.status_code, retry_after=delay)
        return error, backoff if delay is None else min(delay, self.max_backoff)

    def _status_error(self, response: httpx.Response) -> ModelError:
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
                self._secrets(),
                hint=f"Check the key in {API_KEY_ENV} (or api_key=) and the organization",
            )
            return ModelAccessError(text, status=status)
        hint = "Check the model name" if status == 404 else ""
        text = error_message(self._label(), status, kind, message, self._secrets(), hint=hint)
        transient = status in (408, 409, 429) or status >= 500
        # An exhausted quota is a 429 too, but waiting does not fix it.
        return ModelError(
            text, status=status, retryable=transient and "insufficient_quota" not in (kind or "")
        )


__all__ = ["API_KEY_ENV", "OpenAIHTTP"]
