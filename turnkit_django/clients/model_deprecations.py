"""Models the installed provider SDK retires: the check behind ``turnkit.W004`` / ``turnkit.W005``.

``sdk_deprecations()`` reads the ``anthropic`` SDK's own table of deprecated models (name ->
end-of-life text), ``end_of_life`` parses that text into a date, and ``model_messages`` turns the
project's configured models (gathered by :func:`turnkit_django.checks.configured_models`) into
warnings: deprecated, or past its end of life. ``turnkit_django.checks`` registers the check.
"""

from __future__ import annotations

import re
from datetime import date, datetime

from django.core.checks import CheckMessage, Warning


def sdk_deprecations() -> dict[str, str]:
    """The installed ``anthropic`` SDK's own table of deprecated models: name -> end-of-life.

    Empty when the SDK is not installed or has no such table (then nothing is reported).
    """
    try:
        from anthropic._data import DEPRECATED_MODELS  # noqa: PLC0415 - optional SDK
    except ImportError:
        try:  # older SDKs kept the table next to the Messages resource
            from anthropic.resources.messages import DEPRECATED_MODELS  # noqa: PLC0415
        except ImportError:
            return {}
    return dict(DEPRECATED_MODELS)


def end_of_life(text: str) -> date | None:
    """Parse the SDK's end-of-life text ("November 30th, 2026"); None if it is not a date."""
    cleaned = re.sub(r"(\d+)(st|nd|rd|th)\b", r"\1", text.strip())
    for pattern in ("%B %d, %Y", "%b %d, %Y", "%Y-%m-%d"):
        try:
            return datetime.strptime(cleaned, pattern).date()
        except ValueError:
            continue
    return None


def model_messages(models: dict[str, str], table: dict[str, str],
                   today: date) -> list[CheckMessage]:
    """W004 for models the SDK lists as deprecated, W005 for those past their end of life."""
    messages: list[CheckMessage] = []
    for model, where in models.items():
        if model not in table:
            continue
        eol = end_of_life(table[model])
        hint = ("Switch to a current model (turnkit's default is "
                "'claude-sonnet-5-5'); see the provider's model deprecations page.")
        if eol is not None and eol <= today:
            messages.append(Warning(
                f"{where} is {model!r}, which reached end of life on {eol:%Y-%m-%d} according "
                "to the installed anthropic SDK: requests for it fail.", hint=hint,
                id="turnkit.W005"))
        else:
            messages.append(Warning(
                f"{where} is {model!r}, which the installed anthropic SDK lists as deprecated "
                f"(end of life: {table[model]}).", hint=hint, id="turnkit.W004"))
    return messages


__all__ = ["end_of_life", "model_messages", "sdk_deprecations"]
