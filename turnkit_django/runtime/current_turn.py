"""The handle user code receives for the turn the runtime is executing.

Tools (``ToolContext.turn``), output policies and context contributors receive the public
:class:`turnkit_django.Turn` handle, so they can read the turn and act on it like application
code. That class lives in the entry-point layer, above the runtime; it registers itself here when
:mod:`turnkit_django.api.handles` is imported (the app config imports it in ``ready()``, so every
process has it). Below that layer the handle is typed as the
:class:`~turnkit_django.tools.turn_view.TurnView` protocol, which the class must satisfy.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..exceptions import ConfigurationError
from ..tools.turn_view import TurnView

if TYPE_CHECKING:
    from ..models import Turn

#: ``factory(row, agent, running, binding=...)``: ``running`` is the TurnContext of the execution
#: that hands the handle to user code (tools, output policies), or None; ``binding`` (a tool's
#: handle only) the ToolBinding its media calls write under.
HandleFactory = Callable[..., TurnView]
_factory: HandleFactory | None = None


def provide(factory: HandleFactory) -> None:
    """Set the class (or factory) that wraps a turn row for user code."""
    global _factory
    _factory = factory


def turn_handle(row: Turn, agent: Any = None, running: Any = None,
                binding: Any = None) -> TurnView:
    """The public handle of ``row`` for a tool, a policy or a context contributor; ``running``
    (the claimed turn's context) lets a tool or a policy act as the running turn, ``binding``
    lets a tool's media calls write under its execution."""
    if _factory is None:
        raise ConfigurationError(
            "turnkit_django is not ready: add 'turnkit_django' to INSTALLED_APPS and call "
            "django.setup() before running turns"
        )
    return _factory(row, agent, running, binding=binding)


__all__ = ["HandleFactory", "provide", "turn_handle"]
