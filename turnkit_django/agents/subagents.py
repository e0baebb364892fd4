"""Sub-agents as tools: the plain ``task`` tool, and typed delegation with an argument model.

``Agent(sub_agents=[writer])`` gives the parent a tool named after ``writer`` that takes one
``task`` string. A :class:`SubAgentTool` listed in ``tools`` exposes a sub-agent with its own
pydantic argument model instead; the child's task is built from the validated arguments in
application code, so bulk data (a file's contents, rows of a report) reaches the child without
passing through the parent model's context:

* ``task="Review {path} for {focus}"``: a format template over the arguments;
* ``task=callable``: ``callable(args) -> str``, given the validated arguments;
* a subclass overriding :meth:`SubAgentTool.task_for`.

The runtime runs the delegation (inline, or fanned out in the background) exactly as for a plain
sub-agent; the child sees only the task this builds.
"""

from __future__ import annotations

import string
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..exceptions import ConfigurationError
from ..tools.tool import Tool, ToolContext

if TYPE_CHECKING:
    from .definition import AgentDefinition

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


__all__ = ["SubAgentTool", "TaskArgs", "TaskBuilder"]
