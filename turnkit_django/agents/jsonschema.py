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
from collections.abc import Callable, Mapping, Sequence

from ..base.serialization import JsonMapping

Problem = dict[str, str]

_CHECKS: dict[str, Callable[[object], bool]] = {
    "string": lambda v: isinstance(v, str),
    "integer": lambda v: (isinstance(v, int) and not isinstance(v, bool))
    or (isinstance(v, float) and v.is_integer()),
    "number": lambda v: isinstance(v, int | float) and not isinstance(v, bool),
    "boolean": lambda v: isinstance(v, bool),
    "array": lambda v: isinstance(v, list | tuple),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}


def _kind(value: object) -> str:
    for name in ("null", "boolean", "integer", "number", "string", "array", "object"):
        if _CHECKS[name](value):
            return name
    return type(value).__name__


def _at(path: str, problem: str) -> Problem:
    return {"field": path or "(input)", "problem": problem}


def _join(path: str, key: object) -> str:
    return f"{path}.{key}" if path else str(key)


def _number_at(schema: JsonMapping, key: str) -> int | float | None:
    """The number a keyword gives (None when absent or not a number)."""
    value = schema.get(key)
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _list_at(schema: JsonMapping, key: str) -> Sequence[object]:
    """The list a keyword gives (empty when absent or not a list)."""
    value = schema.get(key)
    return value if isinstance(value, list | tuple) else ()


def _resolve(ref: object, root: JsonMapping) -> object:
    if not isinstance(ref, str) or not ref.startswith("#"):
        raise ValueError(f"only local $ref values are supported, got {ref!r}")
    node: object = root
    for token in [t for t in ref[1:].split("/") if t]:
        if not isinstance(node, Mapping):
            raise ValueError(f"$ref {ref!r} does not point into the schema")
        node = node[token.replace("~1", "/").replace("~0", "~")]
    return node


def problems(value: object, schema: object, path: str = "",
             root: JsonMapping | None = None) -> list[Problem]:
    """Return what is wrong with ``value`` under ``schema`` (an empty list when it fits)."""
    if schema is True or schema == {}:
        return []
    if schema is False:
        return [_at(path, "no value is allowed here")]
    if not isinstance(schema, Mapping):
        raise ValueError(f"a JSON schema must be an object or a boolean, got {schema!r}")
    root = schema if root is None else root
    if "$ref" in schema:
        return problems(value, _resolve(schema["$ref"], root), path, root)
    types = schema.get("type")
    if types is not None:
        names = [types] if isinstance(types, str) else [str(n) for n in _list_at(schema, "type")]
        if not any(_CHECKS.get(n, lambda v: True)(value) for n in names):
            return [_at(path, f"expected {' or '.join(names)}, got {_kind(value)}")]
    found: list[Problem] = []
    if "enum" in schema and value not in _list_at(schema, "enum"):
        found.append(_at(path, f"must be one of {json.dumps(schema['enum'])}"))
    if "const" in schema and value != schema["const"]:
        found.append(_at(path, f"must be {json.dumps(schema['const'])}"))
    if isinstance(value, str):
        found += _string(value, schema, path)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        found += _number(value, schema, path)
    elif isinstance(value, list | tuple):
        found += _array(list(value), schema, path, root)
    elif isinstance(value, dict):
        found += _object(value, schema, path, root)
    found += _combined(value, schema, path, root)
    return found


def _string(value: str, schema: JsonMapping, path: str) -> list[Problem]:
    found = []
    least, most, pattern = _number_at(schema, "minLength"), _number_at(schema, "maxLength"), \
        schema.get("pattern")
    if least is not None and len(value) < least:
        found.append(_at(path, f"must have at least {least} characters"))
    if most is not None and len(value) > most:
        found.append(_at(path, f"must have at most {most} characters"))
    if isinstance(pattern, str) and not re.search(pattern, value):
        found.append(_at(path, f"must match the pattern {pattern!r}"))
    return found


def _number(value: float, schema: JsonMapping, path: str) -> list[Problem]:
    bounds: list[tuple[str, Callable[[float], bool], str]] = [
        ("minimum", lambda b: value >= b, "at least"),
        ("maximum", lambda b: value <= b, "at most"),
        ("exclusiveMinimum", lambda b: value > b, "greater than"),
        ("exclusiveMaximum", lambda b: value < b, "less than"),
        ("multipleOf", lambda b: (value / b).is_integer(), "a multiple of"),
    ]
    found = []
    for key, ok, words in bounds:
        bound = _number_at(schema, key)
        if bound is not None and not ok(bound):
            found.append(_at(path, f"must be {words} {bound}"))
    return found


def _array(value: list[object], schema: JsonMapping, path: str,
           root: JsonMapping) -> list[Problem]:
    found = []
    least, most = _number_at(schema, "minItems"), _number_at(schema, "maxItems")
    if least is not None and len(value) < least:
        found.append(_at(path, f"must have at least {least} items"))
    if most is not None and len(value) > most:
        found.append(_at(path, f"must have at most {most} items"))
    if schema.get("uniqueItems"):
        seen = [json.dumps(v, sort_keys=True, default=str) for v in value]
        if len(set(seen)) != len(seen):
            found.append(_at(path, "items must be unique"))
    prefix = _list_at(schema, "prefixItems")
    for index, item in enumerate(value):
        sub = prefix[index] if index < len(prefix) else schema.get("items", True)
        found += problems(item, sub, _join(path, index), root)
    return found


def _object(value: Mapping[object, object], schema: JsonMapping, path: str,
            root: JsonMapping) -> list[Problem]:
    found = [_at(_join(path, name), "field required")
             for name in _list_at(schema, "required") if name not in value]
    least, most = _number_at(schema, "minProperties"), _number_at(schema, "maxProperties")
    if least is not None and len(value) < least:
        found.append(_at(path, f"must have at least {least} fields"))
    if most is not None and len(value) > most:
        found.append(_at(path, f"must have at most {most} fields"))
    properties = schema.get("properties") or {}
    if not isinstance(properties, Mapping):
        properties = {}
    extra = schema.get("additionalProperties", True)
    for name, item in value.items():
        if name in properties:
            found += problems(item, properties[name], _join(path, name), root)
        elif extra is False:
            found.append(_at(_join(path, name), "extra field not permitted"))
        elif isinstance(extra, dict):
            found += problems(item, extra, _join(path, name), root)
    return found


def _combined(value: object, schema: JsonMapping, path: str,
              root: JsonMapping) -> list[Problem]:
    found = []
    for sub in _list_at(schema, "allOf"):
        found += problems(value, sub, path, root)
    if "anyOf" in schema and all(problems(value, s, path, root)
                                 for s in _list_at(schema, "anyOf")):
        found.append(_at(path, "matches none of the allowed forms (anyOf)"))
    if "oneOf" in schema:
        matches = sum(not problems(value, s, path, root) for s in _list_at(schema, "oneOf"))
        if matches != 1:
            found.append(_at(path, f"must match exactly one form (oneOf), matches {matches}"))
    if "not" in schema and not problems(value, schema["not"], path, root):
        found.append(_at(path, "matches a form that is not allowed (not)"))
    return found


__all__ = ["problems"]
