"""Agent definitions: instructions, model, tools, sub-agents, limits and contracts.

:class:`AgentDefinition` is everything the runtime needs to know about an agent; it does no
I/O. The public :class:`turnkit_django.Agent` adds the ways to use one (``run``, ``prepare``,
``submit``, ``conversation``) on top of it.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, TypedDict

from pydantic import BaseModel, TypeAdapter, ValidationError

from ..base.serialization import JsonObject
from ..clients import Client, default_client
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError, InputError
from ..store.input_checks import model_problem
from ..store.limits import Limits, check_limits, resolve_limits
from ..tools.sources import ToolSource
from ..tools.tool import Tool
from . import policies, prompting
from .compaction import check_options as check_compaction
from .jsonschema import problems
from .schema_check import schema_problem
from .skills import LOAD_SKILL, LoadSkillTool, Skill, as_skills, check_keys
from .subagents import SubAgentTool
from .tool_policy import ToolPolicy, check_tool_policy

if TYPE_CHECKING:
    from ..events import EventCallback
    from ..tools.turn_view import TurnView

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


def _named(value: object) -> object:
    """A value for a fingerprint: a function by its qualified name, anything else as it is."""
    if callable(value) and hasattr(value, "__qualname__"):
        return f"{getattr(value, '__module__', '')}.{value.__qualname__}"
    return value if value is None or isinstance(value, str) else type(value).__qualname__


class AgentDefinition:
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
        tools: Sequence[Tool | ToolSource] = (),
        sub_agents: Sequence[AgentDefinition] = (),
        output_schema: Schema = None,
        input_schema: Schema = None,
        max_iterations: int | None = None,
        max_tool_executions: int | None = None,
        max_tool_executions_by_name: dict[str, int] | None = None,
        max_spend: Decimal | str | float | None = None,
        max_depth: int | None = None,
        timeout: float | None = None,
        client: Client | None = None,
        thinking: JsonObject | None = None,
        prompt_mode: str | None = None,
        system_prompt: str | Callable[[prompting.Prompt], object] | None = None,
        on_event: EventCallback | None = None,
        skills: Sequence[Skill] | Skill | None = None,
        available_skills: Sequence[Skill] | Skill | None = None,
        output_policy: object = None,
        output_policy_mode: str = "fail",
        output_retries: int = 0,
        context_contributors: Sequence[Callable[[TurnView], object]] = (),
        compaction: bool | JsonObject | None = None,
        orchestrator: bool = False,
        tool_policy: ToolPolicy | None = None,
    ) -> None:
        self.name = check_name(name)
        for option, text in (("instructions", instructions), ("description", description)):
            if not isinstance(text, str):
                raise ConfigurationError(f"agent {name!r}: {option} must be a str, got a "
                                         f"{type(text).__name__}")
        self.instructions = instructions
        self.description = description
        if problem := model_problem(model):
            raise ConfigurationError(f"agent {name!r}: model {problem}")
        self.model = model
        #: Tool sources (MCP servers): their tools are listed when a turn starts.
        self.tool_sources = [t for t in tools if isinstance(t, ToolSource)]
        self.tools = [t for t in tools if not isinstance(t, ToolSource)]
        self.sub_agents = list(sub_agents)
        self.output_schema = output_schema
        self.input_schema = input_schema
        self.limit_overrides: LimitOverrides = {
            "max_iterations": max_iterations,
            "max_tool_executions": max_tool_executions,
            "max_tool_executions_by_name": max_tool_executions_by_name,
            "max_spend": max_spend,
            "max_depth": max_depth,
            "timeout": timeout,
        }
        check_limits(f"agent {name!r}", **self.limit_overrides)  # here, not at the first run
        if client is not None and not callable(getattr(client, "complete", None)):
            raise ConfigurationError(
                f"agent {name!r}: client must be a model client (an object with "
                f"complete(request), such as AnthropicClient()) or None for TURNKIT['CLIENT'], "
                f"got {repr(client)[:40]}")
        self.client = client
        check_thinking(thinking, f"agent {name!r}")
        self.thinking = thinking
        prompting.check_options(name, prompt_mode, system_prompt)
        if not isinstance(orchestrator, bool):
            raise ConfigurationError(f"agent {name!r}: orchestrator must be True or False")
        self.orchestrator = orchestrator
        # An orchestrator works a task to its end: the task prompt mode unless one is chosen.
        self.prompt_mode = prompt_mode or ("task" if orchestrator else None)
        self.tool_policy = check_tool_policy(name, tool_policy)
        self.system_prompt = system_prompt
        if on_event is not None and not callable(on_event):
            raise ConfigurationError(f"agent {name!r}: on_event must be a callable receiving "
                                     f"each Event, or None; got {repr(on_event)[:40]}")
        self.on_event = on_event
        self.skills = as_skills(skills, agent=name, option="skills")
        self.available_skills = as_skills(available_skills, agent=name, option="available_skills")
        check_keys(name, self.skills, self.available_skills)
        self._load_skill = LoadSkillTool([*self.skills, *self.available_skills])
        self.output_policies = policies.build(output_policy, agent=name)
        policies.check_options(name, output_policy_mode, output_retries)
        self.output_policy_mode = output_policy_mode
        self.output_retries = output_retries
        self.context_contributors = tuple(context_contributors)
        for item in self.context_contributors:
            if not callable(item):
                raise ConfigurationError(
                    f"agent {name!r}: context contributor {item!r} is not callable; pass "
                    "functions taking the turn and returning a string or a dict"
                )
        check_compaction(compaction, f"agent {name!r}")
        self.compaction = compaction
        self._check()

    # -- definition ------------------------------------------------------------

    def _check(self) -> None:
        seen: dict[str, Tool] = {}
        skill_tools = [t for s in (*self.skills, *self.available_skills) for t in s.tools]
        builtin = [self._load_skill] if self.available_skills else []
        for sub in self.sub_agents:
            if not isinstance(sub, AgentDefinition):
                raise ConfigurationError(
                    f"agent {self.name!r}: sub_agents takes agents, got {sub!r}; list a "
                    "SubAgentTool (typed delegation) in tools=[...] instead"
                )
        for item in [*self.tools, *skill_tools, *builtin,
                     *(SubAgentTool(a) for a in self.sub_agents)]:
            if not isinstance(item, Tool):
                raise ConfigurationError(
                    f"agent {self.name!r}: {item!r} is not a tool; decorate functions with "
                    "@tool, subclass turnkit_django.Tool, or list an MCPServer"
                )
            item.check()
            # One tool object may be listed twice (by two skills); two objects may not share a name.
            if seen.setdefault(item.tool_name, item) is not item:
                raise ConfigurationError(
                    f"agent {self.name!r}: two tools are named {item.tool_name!r} (tools, skill "
                    f"tools, sub-agents and {LOAD_SKILL!r} share one namespace); rename one"
                )
        sources: set[str] = set()
        for source in self.tool_sources:
            source.check()
            if source.name in sources:
                raise ConfigurationError(f"agent {self.name!r}: two tool sources are named "
                                         f"{source.name!r}; pass name= to tell them apart")
            sources.add(source.name)
        schema_json(self.output_schema, f"agent {self.name!r}: output_schema")
        schema_json(self.input_schema, f"agent {self.name!r}: input_schema")

    def tool_table(self, loaded: Iterable[str] | None = None) -> dict[str, Tool]:
        """Return the tools the model may call, by name.

        ``loaded`` names the available skills loaded in a turn: only their tools are included.
        None includes every tool the agent can ever offer.
        """
        keys = None if loaded is None else set(loaded)
        table: dict[str, Tool] = {t.tool_name: t for t in self.tools}
        for skill in self.skills:
            table.update((t.tool_name, t) for t in skill.tools)
        if self.available_skills:
            table[LOAD_SKILL] = self._load_skill
        for skill in self.available_skills:
            if keys is None or skill.key in keys:
                table.update((t.tool_name, t) for t in skill.tools)
        for sub in self.sub_agents:
            table[sub.name] = SubAgentTool(sub)
        return table

    def delegates(self) -> list[AgentDefinition]:
        """The agents this one delegates to: its sub-agents and the agents of its typed
        sub-agent tools (its own and its skills')."""
        tools = [*self.tools, *(t for s in (*self.skills, *self.available_skills)
                                for t in s.tools)]
        return [*self.sub_agents, *(t.agent for t in tools if isinstance(t, SubAgentTool))]

    def reachable_agents(self) -> Iterable[AgentDefinition]:
        """Every agent reachable through sub-agents and sub-agent tools, depth first."""
        seen: set[int] = {id(self)}
        stack = self.delegates()
        while stack:
            agent = stack.pop()
            if id(agent) in seen:
                continue
            seen.add(id(agent))
            yield agent
            stack.extend(agent.delegates())

    def fingerprint(self) -> str:
        """A digest of the definition, to tell a re-import from a conflicting definition."""
        data = {
            "name": self.name,
            "instructions": self.instructions,
            "description": self.description,
            "model": self.model,
            "tools": sorted(self.tool_table()),
            "tool_sources": [repr(s) for s in self.tool_sources],
            "skills": [s.key for s in self.skills],
            "available_skills": [s.key for s in self.available_skills],
            "limits": {k: str(v) for k, v in self.limit_overrides.items()},
            "orchestrator": self.orchestrator,
            # What changes the turns a worker runs: a re-import gives equal values (and the same
            # functions, by qualified name), another definition does not.
            "thinking": self.thinking,
            "prompt_mode": self.prompt_mode,
            "system_prompt": _named(self.system_prompt),
            "schemas": [schema_json(self.input_schema), schema_json(self.output_schema)],
            "compaction": self.compaction,
            "output_policy": [self.output_policy_mode, self.output_retries,
                              [[p.name, p.content] for p in self.output_policies]],
            "tool_policy": _named(self.tool_policy),
            "context_contributors": [_named(c) for c in self.context_contributors],
        }
        return hashlib.sha256(json.dumps(data, sort_keys=True, default=str).encode()).hexdigest()

    def limits(self) -> Limits:
        return resolve_limits(**self.limit_overrides, where=f"agent {self.name!r}")

    def own_limits(self) -> JsonObject:
        """The count limits this agent set itself (not the settings'): what bounds each turn
        it runs as a child, on that turn's own counts (``runtime.budget.own_budget``)."""
        overrides = self.limit_overrides
        own: JsonObject = {}
        if overrides["max_iterations"] is not None:
            own["max_iterations"] = overrides["max_iterations"]
        if overrides["max_tool_executions"] is not None:
            own["max_tool_executions"] = overrides["max_tool_executions"]
        if overrides["max_tool_executions_by_name"] is not None:
            own["max_tool_executions_by_name"] = dict(overrides["max_tool_executions_by_name"])
        return own

    def resolved_model(self) -> str:
        return self.model or str(turnkit_settings.DEFAULT_MODEL)

    def resolved_client(self) -> Client:
        return self.client or default_client()

    def default_prompt_mode(self, depth: int) -> str:
        return self.prompt_mode or ("minimal" if depth > 0 else "full")

    def validate_input(self, value: object) -> object:
        """Validate run input against ``input_schema``; raise InputError before any write."""
        schema = self.input_schema
        if schema is None or value is None:
            return value
        if isinstance(schema, dict):
            errors = problems(value, schema)
            result = value
        else:
            try:
                result = TypeAdapter(schema).validate_python(value).model_dump(mode="json")
                errors = []
            except ValidationError as exc:
                errors = [
                    {"field": ".".join(str(p) for p in e["loc"]) or "(input)",
                     "problem": e["msg"]}
                    for e in exc.errors(include_url=False, include_input=False)
                ]
        if errors:
            raise InputError(
                f"input for agent {self.name!r} does not match its input_schema: "
                + "; ".join(f"{e['field']}: {e['problem']}" for e in errors),
                errors=errors,
            )
        return result

    def __repr__(self) -> str:
        return f"<Agent {self.name!r}>"


__all__ = ["AgentDefinition", "LimitOverrides", "SubAgentTool", "check_name", "check_thinking",
           "schema_json"]
