"""The ``TRACING`` setting (system check ``turnkit.E025``), cleaned here for
:mod:`turnkit_django.conf`: ``False``/``None`` (the default: no spans), ``True`` (spans without
message text), or a dict of options: ``{"capture_content": True}`` also puts message text (model
input and output, tool arguments and results, error messages) in the spans."""

from __future__ import annotations

from collections.abc import Mapping
from typing import NamedTuple

from .setting_errors import InvalidSetting, SettingProblem

#: The options a ``TRACING`` dict may set, each a bool.
TRACING_OPTIONS = ("capture_content",)


class TracingOptions(NamedTuple):
    """``TRACING`` cleaned: tracing is on; ``capture_content``: message text in the spans."""

    capture_content: bool = False


def clean_tracing(key: str, value: object) -> TracingOptions | None:
    """None (off), or the options of ``True`` / a dict; raise naming what is wrong."""
    if value is None or value is False:
        return None
    if value is True:
        return TracingOptions()
    if isinstance(value, Mapping) and set(value) <= set(TRACING_OPTIONS) and all(
            isinstance(v, bool) for v in value.values()):
        return TracingOptions(**value)
    raise InvalidSetting(SettingProblem(
        "turnkit.E025", key,
        f"TURNKIT[{key!r}] must be True, False, None or a dict of options; got {value!r}.",
        "Use True for spans without message text, or {'capture_content': True} to also put "
        "model input and output and tool arguments and results in the spans (known options: "
        + ", ".join(TRACING_OPTIONS) + ", each True or False)."))


__all__ = ["TRACING_OPTIONS", "TracingOptions", "clean_tracing"]
