"""turnkit-django: durable AI agent turns for Django.

Public surface: import from here (``from turnkit_django import Agent, tool, register``).
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

from .base.moved import install as _install_moved_paths
from .conf.deltas import Delta
from .exceptions import (
    ApprovalError,
    AtomicBlockError,
    AuthorizationError,
    BudgetExceeded,
    CompactionError,
    ConfigurationError,
    DeliveryConflict,
    EvaluationError,
    IdempotencyConflict,
    InputError,
    InputNotFound,
    InvalidTransition,
    KeyConflict,
    LostClaim,
    MediaError,
    ModelAccessError,
    ModelError,
    ModelRateLimited,
    NotFound,
    RunTimeout,
    ToolError,
    TurnkitError,
    WaitError,
)

if TYPE_CHECKING:
    from .agents import Audit, Prompt, Skill, SubAgentTool, Violation, check_output_policy, register
    from .agents.tool_policy import ToolCall
    from .api.handles import Agent, Run, load_conversation, load_run, load_turn
    from .api.handles import ConversationHandle as Conversation
    from .api.handles import TurnHandle as Turn
    from .api.schedules import schedule
    from .clients.evaluation import Choice, Evaluation, Score, YesNo
    from .services import drain, pending_approvals, reconcile
    from .tools.media import ImageTool, ViewMediaTool
    from .tools.tool import Tool, ToolContext, tool

__version__ = "0.1.0.dev0"

_install_moved_paths()

# The names below need Django's app registry (they import models); resolve them lazily so
# ``import turnkit_django`` works in settings files and before ``django.setup()``.
_LAZY = {
    "Agent": ("api.handles", "Agent"),
    "Tool": ("tools.tool", "Tool"),
    "ToolContext": ("tools.tool", "ToolContext"),
    "tool": ("tools.tool", "tool"),
    "ImageTool": ("tools.media", "ImageTool"),
    "ViewMediaTool": ("tools.media", "ViewMediaTool"),
    "register": ("agents", "register"),
    "Run": ("api.handles", "Run"),
    "Turn": ("api.handles", "TurnHandle"),
    "Conversation": ("api.handles", "ConversationHandle"),
    "load_run": ("api.handles", "load_run"),
    "load_turn": ("api.handles", "load_turn"),
    "load_conversation": ("api.handles", "load_conversation"),
    "reconcile": ("services", "reconcile"),
    "drain": ("services", "drain"),
    "pending_approvals": ("services", "pending_approvals"),
    "schedule": ("api.schedules", "schedule"),
    "Skill": ("agents", "Skill"),
    "Violation": ("agents", "Violation"),
    "Audit": ("agents", "Audit"),
    "Prompt": ("agents", "Prompt"),
    "check_output_policy": ("agents", "check_output_policy"),
    "SubAgentTool": ("agents", "SubAgentTool"),
    "ToolCall": ("agents.tool_policy", "ToolCall"),
    "YesNo": ("clients.evaluation", "YesNo"),
    "Choice": ("clients.evaluation", "Choice"),
    "Score": ("clients.evaluation", "Score"),
    "Evaluation": ("clients.evaluation", "Evaluation"),
}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        module, attr = _LAZY[name]
        return getattr(import_module(f".{module}", __name__), attr)
    raise AttributeError(f"module 'turnkit_django' has no attribute {name!r}")


__all__ = [
    "Agent",
    "ApprovalError",
    "AtomicBlockError",
    "Audit",
    "AuthorizationError",
    "BudgetExceeded",
    "Choice",
    "CompactionError",
    "ConfigurationError",
    "Conversation",
    "DeliveryConflict",
    "Delta",
    "Evaluation",
    "EvaluationError",
    "IdempotencyConflict",
    "ImageTool",
    "InputError",
    "InputNotFound",
    "InvalidTransition",
    "KeyConflict",
    "LostClaim",
    "MediaError",
    "ModelAccessError",
    "ModelError",
    "ModelRateLimited",
    "NotFound",
    "Prompt",
    "Run",
    "RunTimeout",
    "Score",
    "Skill",
    "SubAgentTool",
    "Tool",
    "ToolCall",
    "ToolContext",
    "ToolError",
    "Turn",
    "TurnkitError",
    "ViewMediaTool",
    "Violation",
    "WaitError",
    "YesNo",
    "check_output_policy",
    "drain",
    "load_conversation",
    "load_run",
    "load_turn",
    "pending_approvals",
    "reconcile",
    "register",
    "schedule",
    "tool",
]
