"""Tool sources at run time: listed once when a turn starts, recorded, offered from the record.

A turn whose agent has tool sources (MCP servers) asks each source it has no record of for its
tools when a worker starts running it, with no database session held (``waiting_for``), and
records the answers in its state (``listed_tools``) in one fenced write. From then on every
worker running the turn builds the source's tools from that record: a resumed turn offers the
same tools and never lists again. A source whose listing fails is recorded with its error and no
tools (the turn runs on without them; the log says why).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from ..agents import AgentDefinition
from ..base.serialization import JsonObject
from ..tools.tool import Tool
from .context import TurnContext

logger = logging.getLogger("turnkit_django.runtime")


def source_tools(agent: AgentDefinition, listed: Mapping[str, JsonObject],
                 own: Mapping[str, Tool]) -> dict[str, Tool]:
    """The recorded tools of the agent's sources, except those named like one of ``own``."""
    found: dict[str, Tool] = {}
    for source in agent.tool_sources:
        record = listed.get(source.name) or {}
        entries = record.get("tools") or []
        if not isinstance(entries, list):
            continue
        for item in source.tools([e for e in entries if isinstance(e, dict)]):
            if item.tool_name in own or item.tool_name in found:
                logger.warning("agent %r: the tool %r of %r is not offered: another tool has "
                               "its name (use prefix=)", agent.name, item.tool_name, source.name)
                continue
            found[item.tool_name] = item
    return found


def offer(ctx: TurnContext) -> None:
    """List the tools of each source the turn has no record of, and record them (once)."""
    missing = [s for s in ctx.agent.tool_sources if s.name not in ctx.state.listed_tools]
    if not missing:
        return
    listed = dict(ctx.state.listed_tools)
    for source in missing:
        try:
            with ctx.waiting_for("tool", f"{source.name} (listing)", source.list_timeout + 10):
                listed[source.name] = {"tools": list(source.list_tools())}
        except Exception as exc:
            logger.warning("turn %r: the tools of %r were not listed: %s", ctx.row.pk,
                           source.name, exc)
            listed[source.name] = {"tools": [], "error": str(exc)[:1000]}
    state = ctx.state.replace(listed_tools=listed)
    with ctx.fenced.atomic():
        ctx.fenced.record(state)
    ctx.state = state
    own = {k: v for k, v in ctx.tools.items() if not _from_source(v)}
    ctx.tools = {**own, **source_tools(ctx.agent, listed, own)}


def _from_source(tool: Tool) -> bool:
    return getattr(tool, "source", None) is not None


__all__ = ["offer", "source_tools"]
