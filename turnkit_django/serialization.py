"""JSON helpers shared by every layer: snapshots, canonical text, tool results."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

from pydantic import BaseModel

from .exceptions import ConfigurationError


def canonical(value: Any) -> str:
    """A stable JSON text of ``value`` (sorted keys, no spaces), for comparisons and digests."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def snapshot(value: Any, what: str) -> Any:
    """Return a deep JSON copy of ``value``; later changes to the original never leak in."""
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{what} must be JSON-serializable: {exc}") from exc


def json_safe(value: Any) -> Any:
    """Return ``value`` if it is JSON-serializable as stored by JSONField, else its repr."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


def to_json(value: Any) -> Any:
    """Normalise a tool's return value to JSON-compatible data."""
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if isinstance(value, dict):
        return {str(k): to_json(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [to_json(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_json(dataclasses.asdict(value))
    return str(value)


def render_result(value: Any) -> str:
    """Render a tool result as text for output or previews."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


__all__ = ["canonical", "json_safe", "render_result", "snapshot", "to_json"]
