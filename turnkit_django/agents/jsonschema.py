"""A small JSON Schema validator for input schemas given as dicts, with no extra dependency.

Supported keywords: ``type`` (one or a list), ``enum``, ``const``, ``properties``, ``required``,
``additionalProperties`` (false or a schema), ``minProperties``/``maxProperties``, ``items``,
``prefixItems``, ``minItems``/``maxItems``, ``uniqueItems``, ``minLength``/``maxLength``,
``pattern``, ``minimum``/``maximum``, ``exclusiveMinimum``/``exclusiveMaximum``, ``multipleOf``,
``allOf``/``anyOf``/``oneOf``/``not``, and local ``$ref`` (``#/$defs/...``, as pydantic writes
them). Other keywords (``format``, ``if``/``then``, ``patternProperties`` ...) are ignored: use a
pydantic model when you need them.
"""

from __future__ import annotations

import json
import re
from typing import Any

Problem = dict[str, str]

_CHECKS: dict[str, Any] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _kind(value: Any) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _CHECKS[name](value):
            return name
    return type(value).__name__


def _at(path: str, problem: str) -> Problem:
    return {"field": path or "(input)", "problem": problem}


def _join(path: str, key: Any) -> str:
    return f"{path}.{key}" if path else str(key)


def _resolve(ref: str, root: dict[str, Any]) -> Any:
    if not ref.startswith("#"):
        raise ValueError(f"only local $ref values are supported, got {ref!r}")
    node: Any = root
    for token in [t for t in ref[1:].split("/") if t]:
        node = node[token.replace("~1", "/").replace("~0", "~")]
    return node


def problems(value: Any, schema: Any, path: str = "",
             root: dict[str, Any] | None = None) -> list[Problem]:
    """Return what is wrong with ``value`` under ``schema`` (an empty list when it fits)."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [_at(path, "no value is allowed here")]
    root = schema if root is None else root
    if "$ref" in schema:
        return problems(value, _resolve(schema["$ref"], root), path, root)
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else list(types)
        if not any(_CHECKS.get(n, lambda v: True)(value) for n in names):
            return [_at(path, f"expected {' or '.join(names)}, got {_kind(value)}")]
    found: list[Problem] = []
    if "enum" in schema and value not in schema["enum"]:
        found.append(_at(path, f"must be one of {json.dumps(schema['enum'])}"))
    if "const" in schema and value != schema["const"]:
        found.append(_at(path, f"must be {json.dumps(schema['const'])}"))
    if isinstance(value, str):
        found += _string(value, schema, path)
    elif _CHECKS["number"](value):
        found += _number(value, schema, path)
    elif isinstance(value, list | tuple):
        found += _array(list(value), schema, path, root)
    elif isinstance(value, dict):
        found += _object(value, schema, path, root)
    found += _combined(value, schema, path, root)
    return found


def _string(value: str, schema: dict[str, Any], path: str) -> list[Problem]:
    found = []
    if len(value) < schema.get("minLength", 0):
        found.append(_at(path, f"must have at least {schema['minLength']} characters"))
    if "maxLength" in schema and len(value) > schema["maxLength"]:
        found.append(_at(path, f"must have at most {schema['maxLength']} characters"))
    if "pattern" in schema and not re.search(schema["pattern"], value):
        found.append(_at(path, f"must match the pattern {schema['pattern']!r}"))
    return found


def _number(value: float, schema: dict[str, Any], path: str) -> list[Problem]:
    bounds = [
        ("minimum", lambda b: value >= b, "at least"),
        ("maximum", lambda b: value <= b, "at most"),
        ("exclusiveMinimum", lambda b: value > b, "greater than"),
        ("exclusiveMaximum", lambda b: value < b, "less than"),
        ("multipleOf", lambda b: (value / b).is_integer(), "a multiple of"),
    ]
    return [_at(path, f"must be {words} {schema[key]}")
            for key, ok, words in bounds if key in schema and not ok(schema[key])]


def _array(value: list[Any], schema: dict[str, Any], path: str,
           root: dict[str, Any]) -> list[Problem]:
    found = []
    if len(value) < schema.get("minItems", 0):
        found.append(_at(path, f"must have at least {schema['minItems']} items"))
    if "maxItems" in schema and len(value) > schema["maxItems"]:
        found.append(_at(path, f"must have at most {schema['maxItems']} items"))
    if schema.get("uniqueItems"):
        seen = [json.dumps(v, sort_keys=True, default=str) for v in value]
        if len(set(seen)) != len(seen):
            found.append(_at(path, "items must be unique"))
    prefix = schema.get("prefixItems") or []
    for index, item in enumerate(value):
        sub = prefix[index] if index < len(prefix) else schema.get("items", True)
        found += problems(item, sub, _join(path, index), root)
    return found


def _object(value: dict[str, Any], schema: dict[str, Any], path: str,
            root: dict[str, Any]) -> list[Problem]:
    found = [_at(_join(path, name), "field required")
             for name in schema.get("required", []) if name not in value]
    if len(value) < schema.get("minProperties", 0):
        found.append(_at(path, f"must have at least {schema['minProperties']} fields"))
    if "maxProperties" in schema and len(value) > schema["maxProperties"]:
        found.append(_at(path, f"must have at most {schema['maxProperties']} fields"))
    properties = schema.get("properties") or {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found += problems(item, properties[name], _join(path, name), root)
        elif extra is False:
            found.append(_at(_join(path, name), "extra field not permitted"))
        elif isinstance(extra, dict):
            found += problems(item, extra, _join(path, name), root)
    return found


def _combined(value: Any, schema: dict[str, Any], path: str,
              root: dict[str, Any]) -> list[Problem]:
    found = []
    for sub in schema.get("allOf", []):
        found += problems(value, sub, path, root)
    if "anyOf" in schema and all(problems(value, s, path, root) for s in schema["anyOf"]):
        found.append(_at(path, "matches none of the allowed forms (anyOf)"))
    if "oneOf" in schema:
        matches = sum(not problems(value, s, path, root) for s in schema["oneOf"])
        if matches != 1:
            found.append(_at(path, f"must match exactly one form (oneOf), matches {matches}"))
    if "not" in schema and not problems(value, schema["not"], path, root):
        found.append(_at(path, "matches a form that is not allowed (not)"))
    return found


__all__ = ["problems"]
