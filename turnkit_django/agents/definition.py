"""Agent definitions: instructions, model, tools, sub-agents, limits and contracts.

:class:`AgentDefinition` is everything the runtime needs to know about an agent; it does no
I/O. The public :class:`turnkit_django.Agent` adds the ways to use one (``run``, ``prepare``,
``submit``, ``conversation``) on top of it. :class:`SubAgentTool`, the tool a parent delegates
to a sub-agent through, lives here too: it and the definition name each other.
"""

from __future__ import annotations

import hashlib
import json
import string
from collections.abc import Callable, Iterable, Sequence
from decimal import Decimal
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter, ValidationError

from ..base.serialization import JsonObject
from ..clients import Client, default_client
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError, InputError
from ..store.input_checks import model_problem
from ..store.limits import Limits, check_limits, resolve_limits
from ..tools.sources import ToolSource
from ..tools.tool import Tool, ToolContext
from . import policies, prompting
from .compaction import check_options as check_compaction
from .jsonschema import problems
from .option_checks import (
    AGENT_NAME,
    THINKING_KEYS,
    LimitOverrides,
    Schema,
    check_name,
    check_thinking,
    schema_json,
)
from .skills import LOAD_SKILL, LoadSkillTool, Skill, as_skills, check_keys
from .tool_policy import ToolPolicy, check_tool_policy

if TYPE_CHECKING:
    from ..events import EventCallback
    from ..tools.turn_view import TurnView


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


TaskBuilder = str | Callable[[Any], str]


class TaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(description="The complete task for the sub-agent; it sees nothing else.")


class SubAgentTool(Tool):
    """Exposes an agent as a tool: by default named after it, taking one ``task`` string.

    ``SubAgentTool(agent, name=, description=, args=Model, task=template_or_callable)`` is typed
    delegation: the model fills ``args`` (validated like any tool's arguments) and ``task`` turns
    them into the child's task. Subclasses may set ``agent``, ``Args`` and ``task`` as class
    attributes and override :meth:`task_for`.
    """

    Args: type[BaseModel] = TaskArgs
    builtin: ClassVar[str | None] = "sub_agent"
    agent: AgentDefinition
    task: TaskBuilder | None = None

    def __init__(self, agent: AgentDefinition | None = None, *, name: str | None = None,
                 description: str | None = None, args: type[BaseModel] | None = None,
                 task: TaskBuilder | None = None) -> None:
        chosen = agent if agent is not None else getattr(type(self), "agent", None)
        if chosen is None or not hasattr(chosen, "reachable_agents"):
            raise ConfigurationError(
                f"{type(self).__name__} needs the agent it delegates to: "
                f"SubAgentTool(agent, ...) or a class attribute `agent = ...`, got {chosen!r}"
            )
        self.agent = chosen
        self.name = name or type(self).name or chosen.name
        self.description = (description or type(self).description or chosen.description
                            or f"Delegate a task to the {chosen.name} agent.")
        if args is not None:
            if not (isinstance(args, type) and issubclass(args, BaseModel)):
                raise ConfigurationError(f"sub-agent tool {self.name!r}: args must be a pydantic "
                                         f"model class, got {args!r}")
            self.Args = args
        if task is not None:
            self.task = task

    @property
    def typed(self) -> bool:
        """Whether the tool takes its own arguments rather than one ``task`` string."""
        return self.Args is not TaskArgs

    def task_for(self, args: BaseModel) -> str:
        """Build the child's task from the validated arguments."""
        builder = self.task
        if builder is None:
            return str(args.task)  # type: ignore[attr-defined]
        if isinstance(builder, str):
            return builder.format(**args.model_dump())
        return builder(args)

    def check(self) -> None:
        super().check()
        fields = set(self.Args.model_fields)
        overridden = type(self).task_for is not SubAgentTool.task_for
        if self.task is None and "task" not in fields and not overridden:
            raise ConfigurationError(
                f"sub-agent tool {self.name!r} has arguments {sorted(fields)} but no way to "
                "build the child's task: pass task='... {field} ...' (a template over the "
                "arguments) or task=callable(args) -> str, or override task_for()"
            )
        if isinstance(self.task, str):
            names = {f.split(".")[0].split("[")[0]
                     for _, f, _, _ in string.Formatter().parse(self.task) if f}
            unknown = sorted(names - fields)
            if unknown:
                raise ConfigurationError(
                    f"sub-agent tool {self.name!r}: the task template names {unknown}, which "
                    f"are not arguments of {self.Args.__name__} (fields: {sorted(fields)})"
                )
        elif self.task is not None and not callable(self.task):
            raise ConfigurationError(f"sub-agent tool {self.name!r}: task must be a template "
                                     f"string or a callable(args) -> str, got {self.task!r}")

    def call(self, ctx: ToolContext, args: Any) -> Any:  # pragma: no cover - runtime handles it
        raise NotImplementedError("sub-agent calls are executed by the runtime")


__all__ = ["AGENT_NAME", "THINKING_KEYS", "AgentDefinition", "LimitOverrides", "Schema",
           "SubAgentTool", "TaskArgs", "TaskBuilder", "check_name", "check_thinking", "schema_json"]
