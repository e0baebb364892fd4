"""Helpers for the orchestration tests: authorization policies by import path, row snapshots.

Policies are referenced as ``"tests.orchestration.<name>"`` in ``TURNKIT["AUTHORIZATION_POLICY"]``.
``calls`` records every policy call of :func:`allow` and :func:`selective` (cleared per test by
the ``policy_calls`` fixture).
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dispatch import override_turnkit
from turnkit_django import Agent
from turnkit_django.models import Conversation, Delivery, Message, ToolExecution, Turn, Wait
from turnkit_django.testing import FunctionClient, reply

calls: list[tuple[str, Any, dict[str, Any]]] = []
#: ``selective`` denies these actions, and any action on these turn ids.
denied_actions: set[str] = set()
denied_turns: set[str] = set()


def allow(action: str, *, principal: Any, **resources: Any) -> bool:
    calls.append((action, principal, resources))
    return True


def deny(action: str, *, principal: Any, **resources: Any) -> bool:
    return False


def truthy_one(action: str, *, principal: Any, **resources: Any) -> Any:
    return 1


def truthy_yes(action: str, *, principal: Any, **resources: Any) -> Any:
    return "yes"


def selective(action: str, *, principal: Any, **resources: Any) -> bool:
    calls.append((action, principal, resources))
    return action not in denied_actions and resources.get("turn_id") not in denied_turns


def tenant_policy(action: str, *, principal: Any, **resources: Any) -> bool:
    """The multi-tenant example of docs/howto/authorization.md."""
    if not isinstance(principal, dict):
        return False
    if principal.get("staff") and action in {"cancel", "read_messages"}:
        return True
    owners = [value for name, value in resources.items() if name.endswith("_principal")]
    for name, values in resources.items():
        if name.endswith("_principals"):
            owners.extend(values)
    return all(isinstance(owner, dict) and owner.get("tenant") == principal.get("tenant")
               for owner in owners)


DENIALS = ["tests.orchestration.deny", "tests.orchestration.truthy_one",
           "tests.orchestration.truthy_yes"]


@pytest.fixture
def policy_calls() -> Iterator[list[tuple[str, Any, dict[str, Any]]]]:
    calls.clear()
    denied_actions.clear()
    denied_turns.clear()
    yield calls
    calls.clear()
    denied_actions.clear()
    denied_turns.clear()


def policy(path: str | None) -> Any:
    """``override_settings`` with an authorization policy (and the recording dispatcher)."""
    return override_turnkit(AUTHORIZATION_POLICY=path)


def snapshot() -> dict[str, Any]:
    """Everything a denied call must leave unchanged: row counts and every turn's state."""
    counts = {model.__name__: model.objects.count()
              for model in (Conversation, Turn, Message, ToolExecution, Wait, Delivery)}
    turns = sorted(Turn.objects.values_list("pk", "status", "fence", "options", "submitted_at"))
    deliveries = sorted(Delivery.objects.values_list("pk", "delivered_at"))
    return {"counts": counts, "turns": turns, "deliveries": deliveries}


def answering(name: str, text: str = "done", **options: Any) -> Agent:
    """An agent whose model always answers ``text`` at once."""
    return Agent(name, client=FunctionClient(lambda request: reply(text)), **options)


__all__ = [
    "DENIALS",
    "allow",
    "answering",
    "deny",
    "policy",
    "policy_calls",
    "selective",
    "snapshot",
    "tenant_policy",
    "truthy_one",
    "truthy_yes",
]
