"""The tool through which an agent delegates a task to a sub-agent."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from .base import Tool, ToolContext

if TYPE_CHECKING:
    from ..agents import Agent


class TaskArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    task: str = Field(description="The complete task for the sub-agent; it sees nothing else.")


class SubAgentTool(Tool):
    """Exposes an agent as a tool named after it, taking one ``task`` string."""

    Args = TaskArgs
    builtin: ClassVar[str | None] = "sub_agent"

    def __init__(self, agent: Agent) -> None:
        self.agent = agent
        self.name = agent.name
        self.description = agent.description or f"Delegate a task to the {agent.name} agent."

    def call(self, ctx: ToolContext, args: Any) -> Any:  # pragma: no cover - runtime handles it
        raise NotImplementedError("sub-agent calls are executed by the runtime")
