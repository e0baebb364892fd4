"""Tools: ``@tool``, ``Tool``, ``ToolContext``; coordination tools are opt-in imports."""

from __future__ import annotations

from .base import FunctionTool, Tool, ToolContext, tool
from .coordination import launch_agent, send_message, wait_for

__all__ = ["FunctionTool", "Tool", "ToolContext", "launch_agent", "send_message", "tool",
           "wait_for"]
