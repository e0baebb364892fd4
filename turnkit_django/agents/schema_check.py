"""Is a JSON schema dict well formed? Checked when an agent, a run or ``view_media`` is given one.

A schema dict goes to the provider (``output_schema``) or to :mod:`.jsonschema` (``input_schema``);
a malformed one (``{"type": "strin"}``, ``{"required": "name"}``, a ``pattern`` that is no
regular expression, a ``$ref`` to nowhere) would otherwise fail each run, at the provider or in the
validator, long after the definition was written. Only the keywords' shapes are checked; keywords
this module does not know are left alone (they are the provider's business).
"""

from __future__ import annotations

import re
from collections.abc import Mapping

TYPES = frozenset({"string", "integer", "number", "boolean", "array", "object", "null"})
_ONE = ("additionalProperties", "items", "not", "contains", "propertyNames", "additionalItems",
        "unevaluatedProperties", "unevaluatedItems", "if", "then", "else")
_MANY = ("allOf", "anyOf", "oneOf", "prefixItems")
_MAPS = ("properties", "$defs", "definitions", "patternProperties", "dependentSchemas")
_NUMBERS = ("minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum")
_COUNTS = ("minLength", "maxLength", "minItems", "maxItems", "minProperties", "maxProperties",
           "minContains", "maxContains")


def schema_problem(schema: object) -> str | None:
    """What is wrong with ``schema`` (a JSON schema dict), said with the path to it, or None."""
    return _problem(schema, "", schema if isinstance(schema, Mapping) else {})


def _is_number(value: object) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool) and value == value \
        and value not in (float("inf"), float("-inf"))


def _problem(schema: object, path: str, root: Mapping[str, object]) -> str | None:
    at = path or "the schema"
    if isinstance(schema, bool):
        return None
    if not isinstance(schema, Mapping):
        return f"{at} must be a JSON schema (a dict or a boolean), got a {type(schema).__name__}"
    if any(not isinstance(key, str) for key in schema):
        return f"{at} has a key that is not a str"
    kind = schema.get("type")
    kinds = kind if isinstance(kind, list) else [kind]
    if "type" in schema and (not kinds or any(k not in TYPES for k in kinds)):
        return f"{at}: type must be one of {sorted(TYPES)} or a list of them, got {kind!r:.60}"
    required = schema.get("required", [])
    if not isinstance(required, list) or not all(isinstance(r, str) for r in required):
        return f"{at}: required must be a list of property names, got {required!r:.60}"
    if "enum" in schema and not isinstance(schema["enum"], list):
        return f"{at}: enum must be a list of values, got {schema['enum']!r:.60}"
    for key in _NUMBERS:
        if key in schema and not _is_number(schema[key]):
            return f"{at}: {key} must be a number, got {schema[key]!r:.60}"
    if "multipleOf" in schema and not (_is_number(schema["multipleOf"])
                                       and float(str(schema["multipleOf"])) > 0):
        return f"{at}: multipleOf must be a number > 0, got {schema['multipleOf']!r:.60}"
    for key in _COUNTS:
        value = schema.get(key, 0)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            return f"{at}: {key} must be an int >= 0, got {value!r:.60}"
    if "uniqueItems" in schema and not isinstance(schema["uniqueItems"], bool):
        return f"{at}: uniqueItems must be True or False, got {schema['uniqueItems']!r:.60}"
    if "pattern" in schema:
        pattern = schema["pattern"]
        if not isinstance(pattern, str):
            return f"{at}: pattern must be a regular expression (a str), got {pattern!r:.60}"
        try:
            re.compile(pattern)
        except re.error as exc:
            return f"{at}: pattern {pattern!r:.60} is not a regular expression ({exc})"
    if "$ref" in schema and (problem := _ref_problem(schema["$ref"], at, root)):
        return problem
    return _children_problem(schema, path, root)


def _ref_problem(ref: object, at: str, root: Mapping[str, object]) -> str | None:
    if not isinstance(ref, str) or not ref.startswith("#"):
        return f"{at}: $ref must point into the schema itself ('#/$defs/...'), got {ref!r:.60}"
    node: object = root
    for token in [t for t in ref[1:].split("/") if t]:
        token = token.replace("~1", "/").replace("~0", "~")
        if not isinstance(node, Mapping) or token not in node:
            return f"{at}: $ref {ref!r:.60} points to nothing in the schema"
        node = node[token]
    return None


def _children_problem(schema: Mapping[str, object], path: str,
                      root: Mapping[str, object]) -> str | None:
    prefix = f"{path}." if path else ""
    for key in _ONE:
        if key in schema:
            value = schema[key]
            items = value if key == "items" and isinstance(value, list) else [value]
            for i, item in enumerate(items):
                where = f"{prefix}{key}" + (f"[{i}]" if items is value else "")
                if problem := _problem(item, where, root):
                    return problem
    for key in _MANY:
        if key in schema:
            value = schema[key]
            if not isinstance(value, list) or not value:
                return f"{prefix}{key} must be a non-empty list of schemas, got {value!r:.60}"
            for i, item in enumerate(value):
                if problem := _problem(item, f"{prefix}{key}[{i}]", root):
                    return problem
    for key in _MAPS:
        if key in schema:
            value = schema[key]
            if not isinstance(value, Mapping):
                return f"{prefix}{key} must map names to schemas, got {value!r:.60}"
            for name, item in value.items():
                if problem := _problem(item, f"{prefix}{key}.{name}", root):
                    return problem
    return None


__all__ = ["TYPES", "schema_problem"]
