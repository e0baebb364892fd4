"""Tool sources: objects listed in an agent's ``tools=[...]`` that offer tools found at run time.

A source (such as :class:`~turnkit_django.tools.MCPServer`) is asked for its tools once, when a
turn starts (:meth:`ToolSource.list_tools`, I/O, no database session held); the runtime records
the answer with the turn (``Turn.state["listed_tools"]``) and builds the turn's tools from that
record (:meth:`ToolSource.tools`), so a resumed turn offers the same tools without listing again.
"""

from __future__ import annotations

from collections.abc import Sequence

from ..base.serialization import JsonObject
from .tool import Tool


class ToolSource:
    """Base class of tool sources; ``name`` keys the source's record in a turn."""

    name: str = ""
    #: Seconds a listing may take before the turn gives up on this source's tools.
    list_timeout: float = 30.0

    def check(self) -> None:
        """Raise ConfigurationError if the source is unusable."""

    def list_tools(self) -> list[JsonObject]:
        """Ask the source for the tools it offers now: JSON entries :meth:`tools` reads back.
        Raises on failure (the runtime records the failure and offers none of its tools)."""
        raise NotImplementedError(f"{type(self).__name__}.list_tools() is not implemented")

    def tools(self, listed: Sequence[JsonObject]) -> list[Tool]:
        """The tools of a recorded listing (no I/O)."""
        raise NotImplementedError(f"{type(self).__name__}.tools() is not implemented")


__all__ = ["ToolSource"]
