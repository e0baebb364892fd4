"""Checking what ``Turn.paint`` and ``Turn.view_media`` are given, before anything is written.

Each check raises :class:`~turnkit_django.exceptions.MediaError` (``ConfigurationError`` for a
provider) saying what is accepted: a bad value must never reach the provider call, nor a row
that some database cannot store (a NUL, a lone surrogate, a NaN in ``metadata``).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..base.serialization import JsonObject, json_value, unstorable
from ..clients.media_input import byte_limit
from ..exceptions import ConfigurationError, MediaError
from ..store.input_checks import model_problem


def required_text(value: object, operation: str, name: str) -> str:
    """A prompt or an objective: a non-blank ``str`` every database stores as given."""
    if not isinstance(value, str) or not value.strip():
        raise MediaError(f"{operation} needs a non-empty {name}")
    if problem := unstorable(value):
        raise MediaError(f"{operation}(): the {name} {problem}")
    return value


def checked_options(operation: str, *, model: object, provider: object, params: object,
                    max_bytes: object, providers: Iterable[str]) -> JsonObject:
    """Check the options both operations share; return ``params`` as a dict."""
    if problem := model_problem(model):
        raise MediaError(f"{operation}(): model= {problem}")
    if provider is not None and not isinstance(provider, str):
        raise ConfigurationError(f"{operation}(): provider= must be None or one of "
                                 f"{sorted(providers)}, got a {type(provider).__name__}; or "
                                 "pass client=")
    try:
        byte_limit(max_bytes)
    except MediaError as exc:
        raise MediaError(f"{operation}(): {exc}") from None
    return json_object(params, f"{operation}(): params=")


def json_object(value: object, what: str) -> JsonObject:
    """None (as an empty dict) or a dict of JSON every database stores; MediaError otherwise."""
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise MediaError(f"{what} must be a dict (or None), got a {type(value).__name__}")
    try:
        copied = json_value(value, what)
    except TypeError as exc:
        raise MediaError(str(exc)) from None
    if problem := unstorable(copied):
        raise MediaError(f"{what} {problem}")
    return copied


__all__ = ["checked_options", "json_object", "required_text"]
