"""Tools: ``@tool``, ``Tool``, ``ToolContext``; coordination tools are opt-in imports."""

from __future__ import annotations

from .base import FunctionTool, Tool, ToolContext, tool
from .subagent import SubAgentTool

__all__ = ["FunctionTool", "SubAgentTool", "Tool", "ToolContext", "tool"]
