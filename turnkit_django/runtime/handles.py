"""The handle user code receives for the turn the runtime is executing.

Tools (``ToolContext.turn``), output policies and context contributors receive the public
:class:`turnkit_django.Turn` handle, so they can read the turn and act on it like application
code. That class lives in the entry-point layer, above the runtime; it registers itself here when
:mod:`turnkit_django.handles` is imported (the app config imports it in ``ready()``, so every
process has it).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..exceptions import ConfigurationError
from ..models import Turn

#: ``factory(row, agent)``, and ``factory(row, agent, binding=...)`` for a tool's handle.
HandleFactory = Callable[..., Any]
_factory: HandleFactory | None = None


def provide(factory: HandleFactory) -> None:
    """Set the class (or factory) that wraps a turn row for user code: ``factory(row, agent)``."""
    global _factory
    _factory = factory


def turn_handle(row: Turn, agent: Any = None, binding: Any = None) -> Any:
    """The public handle of ``row`` for a tool (bound to its execution: ``binding``), a policy
    or a context contributor."""
    if _factory is None:
        raise ConfigurationError(
            "turnkit_django is not ready: add 'turnkit_django' to INSTALLED_APPS and call "
            "django.setup() before running turns"
        )
    if binding is None:
        return _factory(row, agent)
    return _factory(row, agent, binding=binding)


__all__ = ["HandleFactory", "provide", "turn_handle"]
