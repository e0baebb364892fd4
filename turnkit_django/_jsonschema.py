"""A small JSON-schema check for the subset used by input and output schemas.

Validating against an arbitrary JSON schema is delegated to pydantic by building a model from
the schema's top-level object properties; nested constraints beyond types and ``required`` are
not enforced here (use a pydantic model for those).
"""

from __future__ import annotations

from typing import Any

from pydantic import ValidationError, create_model
from pydantic_core import InitErrorDetails, PydanticCustomError

_TYPES: dict[str, Any] = {
    "string": str,
    "integer": int,
    "number": float,
    "boolean": bool,
    "array": list,
    "object": dict,
    "null": type(None),
}


def validate_json_schema(value: Any, schema: dict[str, Any]) -> None:
    """Raise pydantic's ValidationError when ``value`` does not fit ``schema``."""
    if schema.get("type", "object") != "object":
        expected = _TYPES.get(schema.get("type", ""), object)
        if not isinstance(value, expected):
            raise ValidationError.from_exception_data(
                "input",
                [InitErrorDetails(type=PydanticCustomError("type", f"expected {schema['type']}"),
                                  loc=(), input=value)],
            )
        return
    required = set(schema.get("required", []))
    fields: dict[str, Any] = {}
    for name, prop in (schema.get("properties") or {}).items():
        annotation = _TYPES.get(prop.get("type", ""), Any)
        fields[name] = (annotation, ... if name in required else None)
    model = create_model("Input", **fields)
    if not isinstance(value, dict):
        raise ValidationError.from_exception_data(
            "input",
            [InitErrorDetails(type=PydanticCustomError("type", "expected an object"), loc=(),
                              input=value)],
        )
    model.model_validate(value)
