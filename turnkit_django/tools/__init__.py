"""Tools: ``@tool``, ``Tool``, ``ToolContext``; coordination tools are opt-in imports.

The media tool bases (``ImageTool``, ``ViewMediaTool``, ``PaintImage``) and the read-only tools
(``ReadOnlyTool``, ``ReadFile``, ``GitHubTool``) load on first use: they need the models.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING

from .coordination import launch_agent, send_message, wait_for
from .sources import ToolSource
from .tool import FunctionTool, Tool, ToolContext, tool
from .turn_view import TurnView

if TYPE_CHECKING:  # the checker sees the lazy names' real types
    from .files import ReadFile, ReadOnlyTool
    from .github import GitHubTool
    from .mcp import MCPServer
    from .media import ImageTool, PaintImage, ViewMediaTool

_LAZY = {"ImageTool": "media", "ViewMediaTool": "media", "PaintImage": "media",
         "ReadOnlyTool": "files", "ReadFile": "files", "GitHubTool": "github",
         "MCPServer": "mcp"}


def __getattr__(name: str) -> object:
    if name in _LAZY:
        return getattr(import_module(f".{_LAZY[name]}", __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = ["FunctionTool", "GitHubTool", "ImageTool", "MCPServer", "PaintImage", "ReadFile",
           "ReadOnlyTool",
           "Tool", "ToolContext", "ToolSource", "TurnView", "ViewMediaTool", "launch_agent",
           "send_message", "tool", "wait_for"]
