"""Helpers shared by the provider clients: JSON text, secret redaction, error text.

Nothing here talks to the network; the clients own their transports.
"""

from __future__ import annotations

import base64
import email.utils
import json
import math
from collections.abc import Callable, Iterable, Mapping
from datetime import UTC, datetime

import httpx

from ..base.serialization import JsonMapping, JsonObject, JsonValue
from ..exceptions import ConfigurationError, ModelError
from .protocol import ModelRequest

#: Longest provider error message copied into a ``ModelError``; provider bodies can be large.
MAX_PROVIDER_MESSAGE = 500


def _seconds(value: object, floor_ok: bool) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        return False
    return value >= 0 if floor_ok else value > 0


def _text_or_none(value: object) -> bool:
    return value is None or isinstance(value, str)


def _headers(value: object) -> bool:
    return value is None or (isinstance(value, dict) and all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()))


def _count(value: object, least: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= least


#: What each constructor option of a provider client takes: (is it usable, what to pass).
_OPTIONS: dict[str, tuple[Callable[[object], bool], str]] = {
    "model": (_text_or_none, "a model name (str) or None"),
    "api_key": (_text_or_none, "the key as a str, or None to read the environment"),
    "base_url": (_text_or_none, "a URL (str) such as 'http://localhost:11434/v1', or None"),
    "organization": (_text_or_none, "a str or None"),
    "timeout": (lambda v: _seconds(v, False), "a number of seconds above 0, such as 60.0"),
    "image_timeout": (lambda v: _seconds(v, False), "a number of seconds above 0"),
    "backoff": (lambda v: _seconds(v, True), "a number of seconds >= 0, such as 0.5"),
    "max_backoff": (lambda v: _seconds(v, True), "a number of seconds >= 0, such as 30.0"),
    "max_retries": (lambda v: _count(v, 0), "a whole number >= 0, such as 2"),
    "max_tokens": (lambda v: v is None or _count(v, 1), "a whole number >= 1, or None"),
    "max_tokens_field": (lambda v: v in ("max_completion_tokens", "max_tokens"),
                         "'max_completion_tokens' or 'max_tokens'"),
    "extra_headers": (_headers, "a dict of str header names to str values, or None"),
    "default_headers": (_headers, "a dict of str header names to str values, or None"),
    "strict_output": (lambda v: isinstance(v, bool), "True or False"),
    "prompt_caching": (lambda v: isinstance(v, bool), "True or False"),
}


def check_options(client: str, options: Mapping[str, object]) -> None:
    """Refuse an unusable constructor option of ``client`` with a ``ConfigurationError``.

    ``options`` may hold more names (``self``, transports ...): only those in ``_OPTIONS`` are
    checked. The message shows the value's type, never the value: it may be a key.
    """
    for name, (usable, expected) in _OPTIONS.items():
        if name in options and not usable(options[name]):
            value = options[name]
            shown = f" ({value!r:.40})" if isinstance(value, int | float | str) and name not in (
                "api_key", "base_url") else ""  # keys and URLs may hold secrets
            raise ConfigurationError(f"{client}({name}=...) takes {expected}; got a "
                                     f"{type(value).__name__}{shown}")


def json_text(value: object) -> str:
    """Return ``value`` as text for the model: strings as they are, anything else as JSON."""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def parse_arguments(text: str | None) -> tuple[JsonObject, str | None]:
    """Parse tool-call arguments; return ``(arguments, raw)`` with ``raw`` set when unusable.

    Models sometimes send truncated or invalid JSON. The call is kept (with empty arguments and
    the raw text) so the runtime can answer with a readable tool error instead of failing.
    """
    if text is None or not text.strip():
        return {}, None
    try:
        value = json.loads(text)
    except ValueError:
        return {}, text
    if not isinstance(value, dict):
        return {}, text
    return value, None


def json_object(response: httpx.Response) -> JsonObject | None:
    """Return the JSON object body of an HTTP response, or None when it is not one."""
    try:
        data = response.json()
    except ValueError:
        return None
    return data if isinstance(data, dict) else None


def as_object(value: object) -> JsonObject:
    """Return ``value`` if it is a JSON object, else an empty one."""
    return value if isinstance(value, dict) else {}


def member(data: JsonMapping, key: str) -> JsonObject:
    """Return the JSON object at ``data[key]``; an empty one when it is missing or not one."""
    return as_object(data.get(key))


def members(value: object) -> list[JsonObject]:
    """Return the JSON objects of a JSON list (other items, or a value that is no list: none)."""
    return [item for item in value if isinstance(item, dict)] if isinstance(value, list) else []


def text_or_none(value: object) -> str | None:
    """Return ``value`` if it is a string, else None (a provider's optional text field)."""
    return value if isinstance(value, str) else None


def content_text(content: object) -> str:
    """Return the text of a chat message's content: a string, or the text of its parts."""
    if isinstance(content, list):  # some servers answer with content parts
        return "".join(t for p in members(content) if isinstance(t := p.get("text", ""), str))
    return content if isinstance(content, str) else ""


def parse_output(text: str) -> tuple[bool, JsonValue]:
    """Parse structured output text; return ``(ok, data)``."""
    try:
        return True, json.loads(text)
    except ValueError:
        return False, None


def schema_name(schema: JsonMapping) -> str:
    """Return a provider-safe name (``[A-Za-z0-9_-]{1,64}``) for an output schema."""
    title = str(schema.get("title") or "output")
    name = "".join(c if c.isalnum() or c in "_-" else "_" for c in title)[:64]
    return name or "output"


#: Parts of a header name that mark its value as a credential (``Authorization``, ``api-key``,
#: ``X-Gateway-Token``, ``X-Proxy-Secret`` ...).
SECRET_HEADER_WORDS = ("auth", "key", "token", "secret")


def safe_url(url: str | httpx.URL) -> str:
    """Return ``url`` for messages, reprs and logs: ``scheme://host[:port]/path`` only.

    Userinfo, query string and fragment are left out: proxies and gateways carry credentials
    there (``https://user:password@host/v1``, ``?key=...``).
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return "[invalid URL]"
    return str(parsed.copy_with(username=None, password=None, query=None, fragment=None))


def split_userinfo(url: str) -> tuple[str, dict[str, str]]:
    """Split the credentials out of ``url``: the URL to request, and the header carrying them.

    HTTP libraries log the URLs they request (httpx at INFO, the anthropic SDK at DEBUG), so a
    ``user:password@`` in a base URL is sent as the ``Authorization: Basic`` header httpx would
    make of it anyway, and never reaches a request URL.
    """
    try:
        parsed = httpx.URL(url)
    except (httpx.InvalidURL, TypeError):
        return url, {}  # the request reports the invalid URL
    if not parsed.userinfo:
        return url, {}
    pair = f"{parsed.username}:{parsed.password}".encode()
    header = {"Authorization": "Basic " + base64.b64encode(pair).decode("ascii")}
    return str(parsed.copy_with(username=None, password=None)), header


def client_secrets(
    api_key: str | None, headers: Mapping[str, str], base_url: str | None
) -> tuple[str, ...]:
    """Return every credential a client holds, for :func:`redact`.

    The key; the values of headers whose names look secret (and the credentials after an
    ``Authorization`` scheme such as ``Bearer``), the ``Basic`` header made of ``base_url``'s
    userinfo among them; the password, user name and query values of
    ``base_url``.
    """
    found = [api_key]
    # The ``Authorization: Basic`` header made of base_url's userinfo is sent, so it is one too.
    sent = {**split_userinfo(base_url)[1], **headers} if base_url else headers
    for name, value in sent.items():
        if any(word in name.lower() for word in SECRET_HEADER_WORDS):
            found += [value, value.partition(" ")[2]]
    if base_url:
        try:
            url = httpx.URL(base_url)
        except (httpx.InvalidURL, TypeError):
            found.append(base_url)  # it is unusable anyway: keep all of it out of error text
        else:
            user, _, password = url.userinfo.decode("ascii", "replace").partition(":")
            raw_values = [pair.partition("=")[2] for pair in url.query.decode().split("&")]
            # Both forms: a server may echo the decoded value or the percent-encoded one.
            found += [url.password, url.username, password, user,
                      *url.params.values(), *raw_values]
    return tuple(dict.fromkeys(s for s in found if s))


def redact(text: str, secrets: str | Iterable[str] | None) -> str:
    """Remove each of ``secrets`` from ``text`` (values under 6 characters would mangle it)."""
    if isinstance(secrets, str):
        secrets = (secrets,)
    for secret in sorted(secrets or (), key=len, reverse=True):  # longest first: no fragments
        if len(secret) >= 6:
            text = text.replace(secret, "[redacted]")
    return text


def resolve_model(pinned: str | None, request: ModelRequest, provider: str) -> str:
    """Return the model to call: the client's pinned model, else the request's."""
    model = pinned or request.model
    if not model:
        raise ModelError(
            f"no model for the {provider} request: set the agent's model, "
            "TURNKIT['DEFAULT_MODEL'], or the client's model= argument"
        )
    return model


def error_message(
    provider: str,
    status: int | None,
    kind: str | None,
    message: str | None,
    secrets: str | Iterable[str] | None,
    *,
    hint: str = "",
    request_id: str | None = None,
) -> str:
    """Compose a ``ModelError`` message from the provider's error type and message only.

    Each of ``secrets`` (see :func:`client_secrets`) is removed, also from an echoed body.
    """
    text = f"{provider} request failed"
    if status is not None:
        text += f" with HTTP {status}"
    if kind:
        text += f" ({kind})"
    if message:
        text += f": {message.strip()[:MAX_PROVIDER_MESSAGE]}"
    if request_id:
        text += f" [request id {request_id}]"
    if hint:
        text += f". {hint}"
    return redact(text, secrets)


def provider_error(body: object) -> tuple[str | None, str | None]:
    """Return ``(type, message)`` from an error body in the shapes providers use.

    ``{"error": {"type", "message", "code"}}`` (Anthropic, OpenAI), ``{"error": "text"}``
    (Ollama) and ``{"detail": "text"}`` (FastAPI-based servers such as vLLM).
    """
    if not isinstance(body, dict):
        return None, None
    error = body.get("error")
    if isinstance(error, str):
        return None, error
    if isinstance(body.get("detail"), str):
        return None, body["detail"]
    if not isinstance(error, dict):
        return None, None
    labels = [str(v) for v in (error.get("type"), error.get("code")) if v]
    kind = ", ".join(dict.fromkeys(labels)) or None
    message = error.get("message")
    return kind, str(message) if message is not None else None


def retry_after(headers: Mapping[str, str]) -> float | None:
    """Return the wait a response asks for, in seconds (``retry-after-ms`` or ``Retry-After``)."""
    millis = headers.get("retry-after-ms")
    if millis:
        try:
            return max(float(millis) / 1000, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if not value:
        return None
    try:
        return max(float(value), 0.0)
    except ValueError:
        pass
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    return max((when - datetime.now(UTC)).total_seconds(), 0.0)
