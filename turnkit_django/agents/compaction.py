"""Compaction options: when a long history is summarised, and how (see the runtime's
:mod:`turnkit_django.runtime.compaction` for the algorithm)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import TypedDict

from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from ..store.input_checks import model_problem


class CompactionOptions(TypedDict):
    """The options of compaction, every key set (defaults, then global, then the agent's)."""

    enabled: bool
    context_limit: int
    threshold: float
    reserved_tokens: int
    tail_messages: int
    tool_output_max_chars: int
    model: str | None


DEFAULTS: CompactionOptions = {
    "enabled": True,
    "context_limit": 128_000,
    "threshold": 0.75,
    "reserved_tokens": 20_000,
    "tail_messages": 12,
    "tool_output_max_chars": 2_000,
    "model": None,
}


_DEFAULTS: Mapping[str, object] = DEFAULTS


def check_options(value: object, where: str) -> dict[str, object] | None:
    """Validate a compaction option (True, False, a dict, or an agent's None: the setting's);
    return the dict or None. ``TURNKIT["COMPACTION"] = None`` is refused before this (E020)."""
    if value is None or value is True:
        return {}
    if value is False:
        return None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where}: compaction must be True, False or a dict of options")
    unknown = set(value) - set(DEFAULTS)
    if unknown:
        raise ConfigurationError(f"{where}: unknown compaction options "
                                 f"{sorted(unknown, key=str)}; use {sorted(DEFAULTS)}")
    counts: dict[str, int] = {}
    for key in ("context_limit", "reserved_tokens", "tail_messages", "tool_output_max_chars"):
        number = value.get(key, _DEFAULTS[key])
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ConfigurationError(f"{where}: compaction {key} must be an integer >= 0")
        counts[key] = number
    threshold = value.get("threshold", DEFAULTS["threshold"])
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) \
            or not 0 < threshold <= 1:
        raise ConfigurationError(f"{where}: compaction threshold must be in (0, 1]")
    # merged_options would read "false" as on and a model that is no name as None: refuse both.
    if not isinstance(value.get("enabled", True), bool):
        raise ConfigurationError(f"{where}: compaction enabled must be True or False; "
                                 f"got {value['enabled']!r}")
    if problem := model_problem(value.get("model")):
        raise ConfigurationError(f"{where}: compaction model {problem}")
    if counts["context_limit"] <= counts["reserved_tokens"]:
        raise ConfigurationError(f"{where}: compaction context_limit must exceed reserved_tokens")
    return dict(value)


def _count(options: Mapping[str, object], key: str) -> int:
    value = options[key]
    return value if isinstance(value, int) else int(str(value))  # check_options checked it


def merged_options(agent: str, compaction: object) -> tuple[CompactionOptions, bool]:
    """An agent's options (defaults, then global, then the agent's ``compaction``) and whether
    automatic compaction is on."""
    global_ = check_options(turnkit_settings.COMPACTION, 'TURNKIT["COMPACTION"]')
    own = check_options(compaction, f"agent {agent!r}")
    merged = {**_DEFAULTS, **(global_ or {}), **(own or {})}
    threshold, model = merged["threshold"], merged["model"]
    options = CompactionOptions(
        enabled=bool(merged["enabled"]), context_limit=_count(merged, "context_limit"),
        threshold=float(threshold) if isinstance(threshold, int | float) else 0.75,
        reserved_tokens=_count(merged, "reserved_tokens"),
        tail_messages=_count(merged, "tail_messages"),
        tool_output_max_chars=_count(merged, "tool_output_max_chars"),
        model=model if isinstance(model, str) else None)
    on = global_ is not None and own is not None
    if on and options["context_limit"] <= options["reserved_tokens"]:
        # Each part was valid alone; laid over one another they leave no room for a request.
        raise ConfigurationError(
            f"agent {agent!r}: compaction context_limit ({options['context_limit']}) must "
            f"exceed reserved_tokens ({options['reserved_tokens']}) once the agent's "
            "compaction options are laid over TURNKIT['COMPACTION']; set both in one place")
    return options, on and options["enabled"]


def options_for(agent: str, compaction: object) -> CompactionOptions | None:
    """The options of automatic compaction, or None when it is off for this agent."""
    merged, enabled = merged_options(agent, compaction)
    return merged if enabled else None


__all__ = ["DEFAULTS", "CompactionOptions", "check_options", "merged_options", "options_for"]
