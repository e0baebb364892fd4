"""JSON helpers shared by every layer: snapshots, canonical text, tool results."""

from __future__ import annotations

import dataclasses
import json
import math
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Any, TypeAlias

from pydantic import BaseModel, JsonValue

from ..exceptions import ConfigurationError, InputError

#: A JSON object as the database stores it (a JSONField's value, a tool's arguments, a
#: provider's wire payload): values are :data:`pydantic.JsonValue`, so readers narrow them.
JsonObject: TypeAlias = dict[str, JsonValue]
#: A read-only view of a JSON object, for parameters that only read (accepts any mapping).
JsonMapping: TypeAlias = Mapping[str, object]


#: What stands in for a character no database can store (U+FFFD REPLACEMENT CHARACTER).
REPLACEMENT = "\ufffd"
#: Characters PostgreSQL cannot store: NUL (text and jsonb refuse it) and surrogates (not
#: Unicode scalar values: UTF-8 cannot encode them; a valid pair is combined, not replaced).
_UNSTORABLE = re.compile("[\x00\ud800-\udfff]")


def decimal_text(value: Decimal) -> str:
    """``value`` in fixed-point notation: a cost column's zero is ``0.00000000``, not ``0E-8``."""
    return format(value, "f")


def decimal_json(value: Decimal | None) -> str | None:
    """``value`` as a JSON payload writes it (a cost): :func:`decimal_text`, None when unknown."""
    return None if value is None else decimal_text(value)


def storable_text(text: str) -> str:
    """``text`` with NUL and lone surrogates replaced by U+FFFD (``text`` itself when clean)."""
    if _UNSTORABLE.search(text) is None:
        return text
    text = text.replace("\x00", REPLACEMENT)
    # A UTF-16 round trip joins valid surrogate pairs and replaces the lone ones.
    return text.encode("utf-16-le", "surrogatepass").decode("utf-16-le", "replace")


#: An escaped surrogate in a JSON text (``json.dumps`` writes a valid pair so too).
_ESCAPED_SURROGATE = re.compile(r"\\ud[89a-f]")


def maybe_unstorable(text: str) -> bool:
    """Whether the value ``json.dumps`` (ASCII, the default) wrote as ``text`` may hold what
    :func:`storable` replaces (an escaped NUL or surrogate, NaN, infinity); False means it
    certainly holds nothing of it. Substring tests first: a regular expression costs more."""
    return ("\\u0000" in text or "NaN" in text or "Infinity" in text
            or ("\\ud" in text and _ESCAPED_SURROGATE.search(text) is not None))


def storable(value: Any) -> Any:
    """``value`` as every supported database stores it alike: strings (keys too) through
    :func:`storable_text`, a NaN or infinite float as its text (``"nan"``, ``"inf"``), as
    :func:`to_json` renders other values JSON cannot hold. ``value`` itself when clean.

    A container is first written as JSON text, in C, and walked only when that text shows
    something to replace (the value of every write: the walk would cost more)."""
    if isinstance(value, dict | list | tuple):
        try:
            text = json.dumps(value)
        except (TypeError, ValueError, RecursionError):
            text = None  # not JSON (the walk leaves what it cannot clean)
        if text is not None and not maybe_unstorable(text):
            return value
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, float):
        return value if math.isfinite(value) else str(value)
    if isinstance(value, dict):
        items = [(storable(k) if isinstance(k, str) else k, storable(v))
                 for k, v in value.items()]
        if all(k is old_k and v is old_v
               for (k, v), (old_k, old_v) in zip(items, value.items(), strict=True)):
            return value
        return dict(items)
    if isinstance(value, list | tuple):
        cleaned = [storable(v) for v in value]
        return value if all(c is v for c, v in zip(cleaned, value, strict=True)) else cleaned
    return value


def unstorable(value: Any) -> str | None:
    """What in ``value`` (text or JSON) no database can store, said for the application, or
    None: the check application input passes before anything is written."""
    if isinstance(value, str):
        if "\x00" in value:
            return "contains a NUL character (\\x00); remove or escape it"
        if storable_text(value) != value:
            return ("contains a surrogate code point (such as \\ud800), which is not valid "
                    "Unicode text; decode the text correctly or remove it")
        return None
    if isinstance(value, float) and not math.isfinite(value):
        return f"contains the number {value!r}, which JSON cannot hold; use None or a string"
    if isinstance(value, dict):
        return next(filter(None, (unstorable(v) for v in (*value, *value.values()))), None)
    if isinstance(value, list | tuple):
        return next(filter(None, map(unstorable, value)), None)
    return None


def checked_text(text: str, what: str) -> str:
    """``text`` if every database stores it as given, else InputError saying what to do: for
    application input, refused before anything is written."""
    problem = unstorable(text) if isinstance(text, str) else None
    if problem is not None:
        raise InputError(f"{what} {problem}")
    return text


def canonical(value: Any) -> str:
    """A stable JSON text of ``value`` (sorted keys, no spaces), for comparisons and digests."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), default=str)


def snapshot(value: Any, what: str) -> Any:
    """Return a deep JSON copy of ``value``; later changes to the original never leak in.

    Raise ConfigurationError for a value no database stores alike (see :func:`unstorable`)."""
    problem = unstorable(value)
    if problem is not None:
        raise ConfigurationError(f"{what} {problem}")
    try:
        return json.loads(json.dumps(value))
    except (TypeError, ValueError) as exc:
        raise ConfigurationError(f"{what} must be JSON-serializable: {exc}") from exc


def json_value(value: Any, what: str) -> Any:
    """Return a deep copy of ``value`` if it is JSON as stored (dicts with string keys, lists,
    strings, numbers, booleans, None); raise TypeError naming the first part that is not."""

    def copy(item: Any, path: str) -> Any:
        if item is None or isinstance(item, str | bool | int | float):
            return item
        if isinstance(item, list | tuple):
            return [copy(v, f"{path}[{i}]") for i, v in enumerate(item)]
        if isinstance(item, dict):
            for key in item:
                if not isinstance(key, str):
                    raise TypeError(f"{what} must be JSON with string keys; {path} has the key "
                                    f"{key!r} ({type(key).__name__}): use {str(key)!r}")
            return {k: copy(v, f"{path}[{k!r}]") for k, v in item.items()}
        raise TypeError(f"{what} must be JSON (dicts with string keys, lists, strings, numbers, "
                        f"booleans, None); {path} is {type(item).__name__} {item!r}")

    return copy(value, what)


def json_safe(value: Any) -> Any:
    """Return ``value`` if it is JSON-serializable as stored by JSONField, else its repr."""
    try:
        json.dumps(value)
    except (TypeError, ValueError):
        return repr(value)
    return value


#: The deepest nesting of dicts and lists a stored value keeps: pydantic, which stores the
#: transcript, refuses to serialize much deeper values.
MAX_DEPTH = 64


class _TooDeep(Exception):
    pass


def to_json(value: Any) -> Any:
    """Normalise a tool's return value to JSON-compatible data.

    A value nested deeper than :data:`MAX_DEPTH` is kept as its JSON text (what the model reads
    of it anyway): as data it could not be stored, and the tool has already run.
    """
    try:
        return _json_data(value, 0)
    except _TooDeep:
        return render_result(value)


def _json_data(value: Any, depth: int) -> Any:
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)  # JSON has no NaN or infinity
    if value is None or isinstance(value, str | int | float | bool):
        return value
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        value = dataclasses.asdict(value)
    if isinstance(value, dict | list | tuple | set | frozenset) and depth >= MAX_DEPTH:
        raise _TooDeep
    if isinstance(value, dict):
        return {str(k): _json_data(v, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_json_data(v, depth + 1) for v in value]
    return str(value)


def render_result(value: Any) -> str:
    """Render a tool result as text for output or previews."""
    if isinstance(value, str):
        return value
    try:
        return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)
    except (TypeError, ValueError):
        return str(value)


__all__ = ["REPLACEMENT", "JsonMapping", "JsonObject", "JsonValue", "canonical", "checked_text",
           "decimal_json", "decimal_text", "json_safe", "json_value", "maybe_unstorable",
           "render_result", "snapshot", "storable", "storable_text", "to_json", "unstorable"]
