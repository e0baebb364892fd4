"""Checking what the public entry points are given.

Each check runs before anything is written and raises an error that says what is accepted:
:class:`~turnkit_django.exceptions.InputError` (also a ``ValueError``) for a value of the wrong
kind. Errors name types, never the text they refuse.
"""

from __future__ import annotations

from .exceptions import InputError


def _kind(value: object) -> str:
    return "None" if value is None else f"a {type(value).__name__}"


def require_text(value: object, what: str, *, hint: str = "") -> str:
    """``value`` if it is a non-empty ``str``; InputError otherwise (what every model and
    transcript expects of user text)."""
    if isinstance(value, str) and value.strip():
        return value
    got = ("an empty str" if not value else "a blank str") if isinstance(value, str) \
        else _kind(value)
    raise InputError(f"{what} must be a non-empty str, got {got}{hint}")


__all__ = ["require_text"]
