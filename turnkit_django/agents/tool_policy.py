"""Tool policies: an agent's own rule about each tool call, asked before the call runs.

``Agent(tool_policy=callable)``: before every tool execution (ordinary tools, sub-agents,
coordination tools and ``load_skill``; after the authorization policy and argument validation;
with no transaction open and no lock held) the runtime calls ``callable(call)`` with a
:class:`ToolCall`. It returns:

* ``"allow"`` or ``None``: the call runs;
* ``("block", reason)``: the call does not run; its failed result carries ``reason`` and
  ``"tool_policy_blocked": True``, which the model reads (and may act on);
* anything else, or an exception: the call does not run either, and its failed result names
  the contract the policy broke.

The authorization policy (``TURNKIT["AUTHORIZATION_POLICY"]``) decides what a *principal* may
do, across every agent; a tool policy is one agent's rule about *calls* (their size, shape or
order), whoever the principal is.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass, field

from pydantic import BaseModel

from ..base.error_records import ErrorRecord
from ..base.serialization import JsonObject
from ..exceptions import ConfigurationError
from ..tools.tool import Tool
from ..tools.turn_view import TurnView

logger = logging.getLogger("turnkit_django.tools")

ALLOW = "allow"
BLOCK = "block"
CONTRACT = "a tool policy must return 'allow', None or ('block', reason) with a non-empty reason"


@dataclass(frozen=True)
class ToolCall:
    """A tool call a tool policy decides on: the call, its validated arguments, its turn."""

    name: str
    call_id: str
    #: The arguments as the model sent them, and as the tool's ``Args`` validated them.
    arguments: JsonObject
    args: BaseModel
    tool: Tool
    #: The :class:`turnkit_django.Turn` handle of the calling turn.
    turn: TurnView
    principal: object = None
    context: JsonObject = field(default_factory=dict)


ToolPolicy = Callable[[ToolCall], object]


def check_tool_policy(agent: str, policy: object) -> ToolPolicy | None:
    """Return ``policy`` if it can be an agent's tool policy (None: no policy)."""
    if policy is not None and not callable(policy):
        raise ConfigurationError(
            f"agent {agent!r}: tool_policy must be a callable(call) returning 'allow', None or "
            f"('block', reason), got {policy!r}"
        )
    return policy


def _shown(value: object) -> str:
    text = repr(value)
    return text if len(text) <= 200 else text[:200] + "..."


def decide(policy: ToolPolicy, call: ToolCall) -> ErrorRecord | None:
    """Ask ``policy`` about ``call``; return the failed result that refuses it, or None."""
    try:
        verdict = policy(call)
    except Exception as exc:
        logger.exception("the tool policy raised for %r", call.name)
        return ErrorRecord("tool_policy_error",
                           f"The tool policy raised {type(exc).__name__}: {exc}; {call.name!r} "
                           "was not run.")
    if verdict is None or verdict == ALLOW:
        return None
    if isinstance(verdict, tuple | list) and len(verdict) == 2 and verdict[0] == BLOCK \
            and isinstance(verdict[1], str) and verdict[1].strip():
        return ErrorRecord("tool_policy_blocked", verdict[1], {"tool_policy_blocked": True})
    return ErrorRecord("tool_policy_error",
                       f"The tool policy returned {_shown(verdict)}, so {call.name!r} was not "
                       f"run: {CONTRACT}.")


__all__ = ["ALLOW", "BLOCK", "ToolCall", "ToolPolicy", "check_tool_policy", "decide"]
