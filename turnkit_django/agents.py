"""Agent definitions."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel, TypeAdapter, ValidationError

from .budget import Limits, resolve_limits
from .clients.base import Client
from .exceptions import ConfigurationError, InputError
from .prompts import PROMPT_MODES
from .tools.base import Tool
from .tools.subagent import SubAgentTool

if TYPE_CHECKING:
    from .events import EventCallback
    from .handles import Conversation, Run

Schema = type[BaseModel] | dict[str, Any] | None


def schema_json(schema: Schema) -> dict[str, Any] | None:
    """Return the JSON schema of a pydantic model class or a schema dict."""
    if schema is None:
        return None
    if isinstance(schema, dict):
        return schema
    if isinstance(schema, type) and issubclass(schema, BaseModel):
        return schema.model_json_schema()
    raise ConfigurationError(
        f"a schema must be a pydantic model class or a JSON schema dict, got {schema!r}"
    )


class Agent:
    """A named agent: instructions, model, tools, sub-agents and limits.

    Agents are definitions, not state: create them at import time in ``<app>/agents.py`` and
    ``register()`` them so every process can rebuild their turns by name.
    """

    def __init__(
        self,
        name: str,
        *,
        instructions: str = "",
        description: str = "",
        model: str | None = None,
        tools: Sequence[Tool] = (),
        sub_agents: Sequence[Agent] = (),
        output_schema: Schema = None,
        input_schema: Schema = None,
        max_iterations: int | None = None,
        max_tool_executions: int | None = None,
        max_tool_executions_by_name: dict[str, int] | None = None,
        max_spend: Decimal | str | float | None = None,
        max_depth: int | None = None,
        timeout: float | None = None,
        client: Client | None = None,
        thinking: dict[str, Any] | None = None,
        prompt_mode: str | None = None,
        system_prompt: str | Callable[[Any], str] | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        if not isinstance(name, str) or not name.strip():
            raise ConfigurationError("an agent needs a non-empty name")
        self.name = name
        self.instructions = instructions
        self.description = description
        self.model = model
        self.tools = list(tools)
        self.sub_agents = list(sub_agents)
        self.output_schema = output_schema
        self.input_schema = input_schema
        self.limit_overrides: dict[str, Any] = {
            "max_iterations": max_iterations,
            "max_tool_executions": max_tool_executions,
            "max_tool_executions_by_name": max_tool_executions_by_name,
            "max_spend": max_spend,
            "max_depth": max_depth,
            "timeout": timeout,
        }
        self.client = client
        self.thinking = thinking
        if prompt_mode is not None and prompt_mode not in PROMPT_MODES:
            raise ConfigurationError(
                f"agent {name!r}: prompt_mode must be one of {PROMPT_MODES}, got {prompt_mode!r}"
            )
        self.prompt_mode = prompt_mode
        self.system_prompt = system_prompt
        self.on_event = on_event
        self._check()

    # -- definition ------------------------------------------------------------

    def _check(self) -> None:
        seen: set[str] = set()
        for item in self.tool_table().values():
            item.check()
        for item in [*self.tools, *(SubAgentTool(a) for a in self.sub_agents)]:
            if not isinstance(item, Tool):
                raise ConfigurationError(
                    f"agent {self.name!r}: {item!r} is not a tool; decorate functions with "
                    "@tool or subclass turnkit_django.Tool"
                )
            if item.tool_name in seen:
                raise ConfigurationError(
                    f"agent {self.name!r}: two tools are named {item.tool_name!r}"
                )
            seen.add(item.tool_name)
        schema_json(self.output_schema)
        schema_json(self.input_schema)

    def tool_table(self) -> dict[str, Tool]:
        """Return the tools the model may call, by name."""
        table: dict[str, Tool] = {t.tool_name: t for t in self.tools}
        for sub in self.sub_agents:
            table[sub.name] = SubAgentTool(sub)
        return table

    def reachable_agents(self) -> Iterable[Agent]:
        """Every agent reachable through sub-agents, depth first."""
        seen: set[int] = {id(self)}
        stack = list(self.sub_agents)
        while stack:
            agent = stack.pop()
            if id(agent) in seen:
                continue
            seen.add(id(agent))
            yield agent
            stack.extend(agent.sub_agents)

    def fingerprint(self) -> str:
        """A digest of the definition, to tell a re-import from a conflicting definition."""
        data = {
            "name": self.name,
            "instructions": self.instructions,
            "description": self.description,
            "model": self.model,
            "tools": sorted(self.tool_table()),
            "limits": {k: str(v) for k, v in self.limit_overrides.items()},
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True).encode()).hexdigest()

    def limits(self) -> Limits:
        return resolve_limits(**self.limit_overrides)

    def resolved_model(self) -> str:
        from .conf import turnkit_settings

        return self.model or str(turnkit_settings.DEFAULT_MODEL)

    def resolved_client(self) -> Client:
        from .clients import default_client

        return self.client or default_client()

    def default_prompt_mode(self, depth: int) -> str:
        return self.prompt_mode or ("minimal" if depth > 0 else "full")

    def validate_input(self, value: Any) -> Any:
        """Validate run input against ``input_schema``; raise InputError before any write."""
        schema = self.input_schema
        if schema is None or value is None:
            return value
        try:
            if isinstance(schema, dict):
                from ._jsonschema import validate_json_schema

                validate_json_schema(value, schema)
                return value
            validated = TypeAdapter(schema).validate_python(value)
            return validated.model_dump(mode="json")
        except ValidationError as exc:
            errors = [
                {"field": ".".join(str(p) for p in e["loc"]), "problem": e["msg"]}
                for e in exc.errors(include_url=False, include_input=False)
            ]
            raise InputError(
                f"input for agent {self.name!r} does not match its input_schema", errors=errors
            ) from exc

    # -- use ---------------------------------------------------------------------

    def run(self, task: str, **options: Any) -> Run:
        """Run a bounded task inline, in this process, and return the finished Run."""
        from .handles import Run

        return Run.create(self, task, **options).execute()

    def prepare(self, task: str, **options: Any) -> Run:
        """Create a pending run without executing or submitting it."""
        from .handles import Run

        return Run.create(self, task, **options)

    def submit(self, task: str, *, callback: Any = None, **options: Any) -> Run:
        """Create a run and hand it to background execution; returns at once."""
        return self.prepare(task, **options).submit(callback=callback)

    def conversation(self, **options: Any) -> Conversation:
        """Start a conversation with this agent."""
        from .handles import Conversation

        return Conversation.create(self, **options)

    def __repr__(self) -> str:
        return f"<Agent {self.name!r}>"
