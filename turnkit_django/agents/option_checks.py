"""Checks of an agent's options: its name, its thinking configuration, its schemas and limits.

:class:`~turnkit_django.agents.definition.AgentDefinition` runs them when an agent is defined,
and the runtime runs them again on the options a single turn overrides.
"""

from __future__ import annotations

import re
from decimal import Decimal
from typing import TypedDict

from pydantic import BaseModel

from ..base.serialization import JsonObject
from ..exceptions import ConfigurationError
from .schema_check import schema_problem

Schema = type[BaseModel] | JsonObject | None
THINKING_KEYS = frozenset({"budget", "effort", "adaptive", "display", "type"})
#: Sub-agents become tools named after them, so agent names follow the providers' tool names.
AGENT_NAME = re.compile(r"^[a-zA-Z][a-zA-Z0-9_-]{0,63}$")


class LimitOverrides(TypedDict):
    """An agent's own limits (None: the TURNKIT setting), the keywords of ``resolve_limits``."""

    max_iterations: int | None
    max_tool_executions: int | None
    max_tool_executions_by_name: dict[str, int] | None
    max_spend: Decimal | str | float | None
    max_depth: int | None
    timeout: float | None


def schema_json(schema: Schema, where: str = "a schema") -> JsonObject | None:
    """Return the JSON schema of a pydantic model class or a well-formed schema dict."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        if problem := schema_problem(schema):
            raise ConfigurationError(f"{where} is not a valid JSON schema: {problem}; fix it, "
                                     "or pass a pydantic model class")
        return schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema()
    raise ConfigurationError(
        f"a schema must be a pydantic model class or a JSON schema dict, got {schema!r}"
    )


def check_thinking(value: object, where: str) -> None:
    """Validate a thinking configuration: None, False, or a dict such as ``{"budget": 4000}``."""
    if value is None or value is False:
        return
    if not isinstance(value, dict) or not value:
        raise ConfigurationError(
            f"{where}: thinking must be a non-empty dict such as {{'budget': 4000}} or "
            f"{{'effort': 'low'}}, got {value!r}"
        )
    unknown = set(value) - THINKING_KEYS
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown thinking options {sorted(unknown, key=repr)}; "
            f"use {sorted(THINKING_KEYS)}"
        )
    budget = value.get("budget")
    if budget is not None and (not isinstance(budget, int) or isinstance(budget, bool)
                               or budget <= 0):
        raise ConfigurationError(f"{where}: thinking budget must be a positive integer of tokens")
    for key, kind, shown in (("effort", str, "a level name such as 'low'"),
                             ("display", str, "a str such as 'summarized'"),
                             ("type", str, "the provider's thinking type, such as 'enabled'"),
                             ("adaptive", bool, "True or False")):
        option = value.get(key)
        if option is not None and (not isinstance(option, kind)
                                   or (kind is str and not str(option).strip())):
            raise ConfigurationError(f"{where}: thinking {key} must be {shown}, got "
                                     f"{option!r:.40}")


def check_name(name: object) -> str:
    """Return ``name`` if it can name an agent (and the tool a parent calls it by)."""
    if not isinstance(name, str) or not name.strip():
        raise ConfigurationError("an agent needs a non-empty name")
    if not AGENT_NAME.fullmatch(name):
        raise ConfigurationError(
            f"agent name {name!r} is not allowed: use 1-64 letters, digits, '_' or '-', "
            "starting with a letter (sub-agents become tools, and providers only accept such "
            "tool names)"
        )
    return name


__all__ = ["AGENT_NAME", "THINKING_KEYS", "LimitOverrides", "Schema", "check_name",
           "check_thinking", "schema_json"]
