"""Composing the system prompt of a turn: stable sections, then the turn's dynamic ones.

Stable sections (the orchestrator preamble, agent, instructions, behaviour, loaded skills,
available skills, tools) depend only on the agent's configuration, so they are byte-identical
across requests and runs and a provider can cache them. Dynamic sections (subject, live
context, environment) depend on the turn.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..agents import AgentDefinition
from ..agents.prompting import (
    BEHAVIOUR,
    DATA_NOTICE,
    ORCHESTRATOR,
    Prompt,
    Section,
    capped,
    data_block,
    escape,
)
from ..exceptions import ConfigurationError
from .current_turn import turn_handle

if TYPE_CHECKING:
    from ..models import Conversation, Turn


def _tool_lines(agent: AgentDefinition) -> str:
    lines = []
    for tool in agent.tool_table(loaded=()).values():
        summary = (tool.tool_description.strip().splitlines() or [""])[0]
        properties = tool.spec().parameters.get("properties")
        params = ", ".join(properties if isinstance(properties, dict) else ())
        ends = " Ends the turn." if tool.terminal else ""
        lines.append(f"- {escape(tool.tool_name)}({escape(params)}): {escape(summary)}{ends}")
    return "## Tools\n" + "\n".join(lines) if lines else ""


def _loaded_skills(agent: AgentDefinition) -> str:
    blocks = [
        f'<skill key="{escape(s.key)}" name="{escape(s.title)}">\n{s.content}\n</skill>'
        for s in agent.skills
    ]
    return "## Skills\nFollow these skills when they apply.\n\n" + "\n\n".join(blocks) \
        if blocks else ""


def _available_skills(agent: AgentDefinition) -> str:
    if not agent.available_skills:
        return ""
    lines = []
    for skill in agent.available_skills:
        tools = ", ".join(t.tool_name for t in skill.tools)
        about = f": {escape(skill.description)}" if skill.description else ""
        enables = f" (enables: {escape(tools)})" if tools else ""
        lines.append(f"- {escape(skill.key)} ({escape(skill.title)}){about}{enables}")
    return (
        "## Available skills\nBefore following a skill, load it with the load_skill tool; "
        "loading it also makes its tools callable.\n" + "\n".join(lines)
    )


def _stable_sections(agent: AgentDefinition, mode: str) -> list[Section]:
    identity = f"You are {escape(agent.name)}."
    if agent.description:
        identity += f" {escape(agent.description)}"
    return [
        Section("orchestrator", ORCHESTRATOR if agent.orchestrator else ""),
        Section("agent", identity),
        Section("instructions", agent.instructions.strip()),
        Section("behaviour", BEHAVIOUR[mode]),
        Section("loaded_skills", _loaded_skills(agent)),
        Section("available_skills", _available_skills(agent)),
        Section("tools", _tool_lines(agent)),
    ]


def _contribution(item: Callable[..., Any], turn: Any) -> str:
    """Render one context contributor's output as a data block ("" when it has nothing)."""
    value = item(turn)
    if value is None or value == "" or value == {}:
        return ""
    name = getattr(item, "__name__", type(item).__name__)
    if isinstance(value, dict) and "content" in value:
        name = str(value.get("name") or name)
        limit = None if value.get("max_chars") is None else int(value["max_chars"])
        if value.get("trusted"):
            # The application vouches for it: plain text under a heading, not a data block.
            return f"### {escape(name)}\n{capped(value['content'], limit)}"
        return data_block(name, value["content"], limit)
    return data_block(name, value)


def _dynamic_sections(agent: AgentDefinition, turn: Turn, conversation: Conversation,
                      mode: str) -> list[Section]:
    # A sub-agent (minimal mode) sees only its task: no subject, no live context.
    data = mode != "minimal"
    subject = ""
    if data and conversation.subject_prompt:
        subject = "## Subject\n" + data_block("subject", conversation.subject_prompt)
    blocks = []
    context = (turn.options or {}).get("context")
    if data and context:
        blocks.append(data_block("run_context", context))
    if data and agent.context_contributors:
        handle = turn_handle(turn, agent)
        blocks.extend(_contribution(item, handle) for item in agent.context_contributors)
    blocks = [b for b in blocks if b]
    live = "## Context\n" + "\n\n".join(blocks) if blocks else ""
    notice = DATA_NOTICE if subject or live else ""
    # Anchored at the turn's creation, so every request of a turn (and its preview) agrees.
    anchor = turn.created_at.strftime("%Y-%m-%d %H:%M UTC") if turn.created_at else ""
    environment = f"## Environment\nThe turn started at {anchor}." if anchor else ""
    return [
        Section("subject", subject, stable=False),
        Section("live_context", "\n\n".join(p for p in (live, notice) if p), stable=False),
        Section("environment", environment, stable=False),
    ]


def prompt_mode(agent: AgentDefinition, turn: Turn) -> str:
    """The turn's prompt mode: explicit, else minimal for sub-agents, else full."""
    return (turn.options or {}).get("prompt_mode") or agent.default_prompt_mode(turn.depth)


def compose(agent: AgentDefinition, turn: Turn, conversation: Conversation) -> Prompt:
    """Return the system prompt for a model request of ``turn``."""
    mode = prompt_mode(agent, turn)
    if agent.system_prompt is not None and not callable(agent.system_prompt):
        return Prompt((Section("custom", str(agent.system_prompt)),))
    if mode == "none":
        prompt = Prompt((Section("instructions",
                                 agent.instructions.strip() or f"You are {escape(agent.name)}."),))
    else:
        sections = _stable_sections(agent, mode) + _dynamic_sections(agent, turn, conversation,
                                                                     mode)
        prompt = Prompt(tuple(sections))
    if callable(agent.system_prompt):
        custom = agent.system_prompt(prompt)
        if isinstance(custom, Prompt):
            return custom
        if not isinstance(custom, str):
            raise ConfigurationError(
                f"agent {agent.name!r}: system_prompt returned {type(custom).__name__}; return "
                "a string or the Prompt it was given (changed with replace() or without())"
            )
        return Prompt((Section("custom", custom),))
    return prompt


__all__ = ["compose", "prompt_mode"]
