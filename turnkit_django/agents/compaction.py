"""Compaction options: when a long history is summarised, and how (see the runtime's
:mod:`turnkit_django.runtime.compaction` for the algorithm)."""

from __future__ import annotations

from typing import Any

from ..conf import turnkit_settings
from ..exceptions import ConfigurationError

DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "context_limit": 128_000,
    "threshold": 0.75,
    "reserved_tokens": 20_000,
    "tail_messages": 12,
    "tool_output_max_chars": 2_000,
    "model": None,
}


def check_options(value: Any, where: str) -> dict[str, Any] | None:
    """Validate a compaction setting (True, False, None or a dict); return the dict or None."""
    if value is None or value is True:
        return {}
    if value is False:
        return None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where}: compaction must be True, False or a dict of options")
    unknown = set(value) - set(DEFAULTS)
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown compaction options {sorted(unknown)}; use {sorted(DEFAULTS)}"
        )
    for key in ("context_limit", "reserved_tokens", "tail_messages", "tool_output_max_chars"):
        number = value.get(key, DEFAULTS[key])
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ConfigurationError(f"{where}: compaction {key} must be an integer >= 0")
    threshold = value.get("threshold", DEFAULTS["threshold"])
    if not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise ConfigurationError(f"{where}: compaction threshold must be in (0, 1]")
    limit = value.get("context_limit", DEFAULTS["context_limit"])
    if limit <= value.get("reserved_tokens", DEFAULTS["reserved_tokens"]):
        raise ConfigurationError(f"{where}: compaction context_limit must exceed reserved_tokens")
    return dict(value)


def merged_options(agent: str, compaction: Any) -> tuple[dict[str, Any], bool]:
    """An agent's options (defaults, then global, then the agent's ``compaction``) and whether
    automatic compaction is on."""
    global_ = check_options(turnkit_settings.COMPACTION, 'TURNKIT["COMPACTION"]')
    own = check_options(compaction, f"agent {agent!r}")
    merged = {**DEFAULTS, **(global_ or {}), **(own or {})}
    return merged, global_ is not None and own is not None and bool(merged["enabled"])


def options_for(agent: str, compaction: Any) -> dict[str, Any] | None:
    """The options of automatic compaction, or None when it is off for this agent."""
    merged, enabled = merged_options(agent, compaction)
    return merged if enabled else None


__all__ = ["DEFAULTS", "check_options", "merged_options", "options_for"]
