"""turnkit-django: durable AI agent turns for Django.

Public surface: import from here (``from turnkit_django import Agent, tool, register``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from .exceptions import (
    AuthorizationError,
    BudgetExceeded,
    CompactionError,
    ConfigurationError,
    DeliveryConflict,
    InputError,
    InvalidTransition,
    LostClaim,
    ModelAccessError,
    ModelError,
    ToolError,
    TurnkitError,
    WaitError,
)

if TYPE_CHECKING:
    from .agents import Agent
    from .handles import Conversation, Run, Turn, load_conversation, load_run, load_turn
    from .policies import check_output_policy
    from .registry import register
    from .services import drain, reconcile
    from .skills import Skill
    from .tools.base import Tool, ToolContext, tool

__version__ = "0.1.0.dev0"

# The names below need Django's app registry (they import models); resolve them lazily so
# ``import turnkit_django`` works in settings files and before ``django.setup()``.
_LAZY = {
    "Agent": ("agents", "Agent"),
    "Tool": ("tools.base", "Tool"),
    "ToolContext": ("tools.base", "ToolContext"),
    "tool": ("tools.base", "tool"),
    "register": ("registry", "register"),
    "Run": ("handles", "Run"),
    "Turn": ("handles", "Turn"),
    "Conversation": ("handles", "Conversation"),
    "load_run": ("handles", "load_run"),
    "load_turn": ("handles", "load_turn"),
    "load_conversation": ("handles", "load_conversation"),
    "reconcile": ("services", "reconcile"),
    "drain": ("services", "drain"),
    "Skill": ("skills", "Skill"),
    "check_output_policy": ("policies", "check_output_policy"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from importlib import import_module

        module, attr = _LAZY[name]
        return getattr(import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'turnkit_django' has no attribute {name!r}")


__all__ = [
    "Agent",
    "AuthorizationError",
    "BudgetExceeded",
    "CompactionError",
    "ConfigurationError",
    "Conversation",
    "DeliveryConflict",
    "InputError",
    "InvalidTransition",
    "LostClaim",
    "ModelAccessError",
    "ModelError",
    "Run",
    "Skill",
    "Tool",
    "ToolContext",
    "ToolError",
    "Turn",
    "TurnkitError",
    "WaitError",
    "check_output_policy",
    "drain",
    "load_conversation",
    "load_run",
    "load_turn",
    "reconcile",
    "register",
    "tool",
]
