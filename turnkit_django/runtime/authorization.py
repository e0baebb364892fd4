"""The authorization policy: only a literal ``True`` allows an action."""

from __future__ import annotations

import logging
from typing import Any

from ..conf import turnkit_settings
from ..exceptions import AuthorizationError

logger = logging.getLogger("turnkit_django.authorization")

ACTIONS = frozenset(
    {"tool", "launch_agent", "wait", "callback", "send_message", "cancel", "read_messages",
     "pause", "resume", "steer", "evaluate", "approve", "deny"}
)


#: The permission that lets a staff user read every transcript (the admin's turn pages, and
#: without an ``AUTHORIZATION_POLICY`` turnkit's run views).
TRANSCRIPT_PERMISSION = "turnkit.view_transcript"


def is_allowed(action: str, *, principal: Any, **resources: Any) -> bool:
    """Ask ``TURNKIT["AUTHORIZATION_POLICY"]``; no policy means a trusted application."""
    policy = turnkit_settings.AUTHORIZATION_POLICY
    if policy is None:
        return True
    try:
        decision = policy(action, principal=principal, **resources)
    except Exception:
        logger.exception("authorization policy raised for action %r; treating as denied", action)
        return False
    return decision is True


def authorize(action: str, *, principal: Any, **resources: Any) -> None:
    """Raise :class:`AuthorizationError` unless the policy allows ``action``."""
    if not is_allowed(action, principal=principal, **resources):
        raise AuthorizationError(action)
