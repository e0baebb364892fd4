"""A tool call before it runs: which tools are callable, refusals, and the outcome type."""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import BaseModel, ValidationError

from ..agents import LOAD_SKILL, AgentDefinition
from ..agents.skills import loaded_keys
from ..agents.tool_policy import ToolCall, decide
from ..base.error_records import ErrorRecord, invalid_arguments, not_authorized
from ..base.serialization import JsonObject
from ..base.states import ToolStatus
from ..exceptions import BudgetExceeded
from ..messages import MEDIA_KINDS, ToolCallPart
from ..store import Terminal
from ..tools.tool import NAME_LENGTH, Tool, validation_error
from .authorization import is_allowed
from .context import TurnContext
from .sources import source_tools


@dataclass(frozen=True)
class CallOutcome:
    """A tool call's result, the terminal record if it ends the turn, and a budget error that
    fails the turn once the result is recorded."""

    status: str
    content: Any
    terminal: Terminal | None = None
    error: BudgetExceeded | None = None

    @classmethod
    def failed(cls, record: ErrorRecord, error: BudgetExceeded | None = None) -> CallOutcome:
        return cls(ToolStatus.FAILED, record.for_model(), error=error)


def turn_tools(agent: AgentDefinition, turn_id: str,
               listed: Mapping[str, JsonObject] | None = None) -> dict[str, Tool]:
    """The tools callable in ``turn_id`` now: the agent's, those of skills it loaded, and those
    its tool sources offered when it started (``listed``: the turn's ``listed_tools``)."""
    if not agent.available_skills:
        table = agent.tool_table(loaded=())
    else:
        table = agent.tool_table(loaded=loaded_keys(turn_id))
    if agent.tool_sources and listed:
        table.update(source_tools(agent, listed, table))
    return table


def response_calls(ctx: TurnContext) -> list[ToolCallPart]:
    """The tool calls of the persisted response: the turn's newest assistant message that is
    not a tool's media (an image a tool made during the batch is an assistant message too)."""
    for chat in reversed(ctx.visible):
        if chat.role == "assistant" and chat.kind not in MEDIA_KINDS:
            return chat.tool_calls
    return []


def unknown_tool(agent: AgentDefinition, name: str, active: dict[str, Tool]) -> ErrorRecord:
    """The failed tool result for a call to a tool that is not callable now."""
    for skill in agent.available_skills:
        if any(t.tool_name == name for t in skill.tools):
            return ErrorRecord("skill_not_loaded",
                               f"The tool {name!r} belongs to the skill {skill.key!r}; call "
                               f"{LOAD_SKILL} with key {skill.key!r} first, then call it again.")
    known = ", ".join(sorted(active)) or "none"
    if len(name) > NAME_LENGTH:  # no tool has such a name; show it cut short
        return ErrorRecord("unknown_tool",
                           f"There is no tool named {name[:40] + '...'!r}: tool names have at "
                           f"most {NAME_LENGTH} characters. Available tools: {known}.")
    return ErrorRecord("unknown_tool",
                       f"There is no tool named {name!r}. Available tools: {known}.")


def precheck(ctx: TurnContext, tool: Tool, call: ToolCallPart) -> tuple[ErrorRecord | None, Any]:
    """Refuse a call before it runs (unreadable arguments, not authorized, invalid, blocked by
    the agent's tool policy); else return its validated arguments. Runs no transaction."""
    if call.duplicate_of is not None:
        return ErrorRecord(
            "duplicate_tool_call_id",
            f"This call reused the id {call.duplicate_of!r} of another tool call, so it was not "
            "run. Give every tool call its own id, and call the tool again if you still need "
            "it."), None
    if call.raw_arguments is not None:
        return invalid_arguments(call.name), None
    if not is_allowed("tool", principal=ctx.principal, tool=call.name, arguments=call.arguments,
                      turn_id=ctx.row.pk, conversation_id=ctx.row.conversation_id):
        return not_authorized(f"You are not allowed to call {call.name!r} for this "
                              "principal."), None
    try:
        args = tool.validate(call.arguments)
    except ValidationError as exc:
        return validation_error(call.name, exc), None
    refusal = _policy_refusal(ctx, tool, call, args)
    return (refusal, None) if refusal is not None else (None, args)


def _policy_refusal(ctx: TurnContext, tool: Tool, call: ToolCallPart,
                    args: BaseModel) -> ErrorRecord | None:
    """Ask the agent's tool policy (the caller holds no lock and no transaction)."""
    policy = ctx.agent.tool_policy
    if policy is None:
        return None
    context = (ctx.row.options or {}).get("context") or {}
    return decide(policy, ToolCall(call.name, call.id, copy.deepcopy(call.arguments), args,
                                   tool, ctx.handle(), copy.deepcopy(ctx.principal),
                                   copy.deepcopy(context)))


__all__ = ["CallOutcome", "precheck", "response_calls", "turn_tools", "unknown_tool"]
