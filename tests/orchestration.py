"""Helpers for the orchestration tests: authorization policies by import path, row snapshots.

Policies are referenced as ``"tests.orchestration.<name>"`` in ``TURNKIT["AUTHORIZATION_POLICY"]``.
``calls`` records every policy call of :func:`allow` and :func:`selective` (cleared per test by
the ``policy_calls`` fixture).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import pytest

from tests.dispatch import override_turnkit
from tests.helpers import expire_lease
from turnkit_django import Agent, services, tool
from turnkit_django.base import failpoints
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.messages import load_parts
from turnkit_django.models import Conversation, Delivery, Message, ToolExecution, Turn, Wait
from turnkit_django.testing import Entry, FunctionClient, call, reply

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


def tenant_recorded(action: str, *, principal: Any, **resources: Any) -> bool:
    """:func:`tenant_policy`, recording every call in ``calls``."""
    calls.append((action, principal, resources))
    return tenant_policy(action, principal=principal, **resources)


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


def scripted(*steps: Any) -> Callable[[ModelRequest], Entry]:
    """A model answering step *n* at its *n*-th call in the transcript it is shown.

    A step is an entry (reply, call, list of calls) or a function of the tool results so far
    (their contents, oldest first) returning one; past the last step it replies "done".
    """
    def respond(request: ModelRequest) -> Entry:
        step = sum(1 for m in request.messages if m.role == "assistant")
        outputs = [p.content for m in request.messages for p in m.tool_results]
        entry = steps[step] if step < len(steps) else reply("done")
        return entry(outputs) if callable(entry) else entry

    return respond


def tool_results(turn_id: str) -> list[tuple[str, bool, Any]]:
    """(call id, is_error, content) of the turn's tool results, in transcript order."""
    found = []
    for message in Message.objects.filter(turn_id=turn_id, role="tool").order_by("sequence"):
        found.extend((p.tool_call_id, p.is_error, p.content) for p in load_parts(message.content))
    return found


def crash_at(point: str, nth: int = 1) -> None:
    """Arm failpoint ``point`` to crash the worker at its ``nth`` pass."""
    passes = {"count": 0}

    def action() -> None:
        passes["count"] += 1
        if passes["count"] >= nth:
            raise failpoints.SimulatedCrash(point)
        failpoints.arm(point, action)

    failpoints.arm(point, action)


def recover(turn_id: str) -> None:
    """The turn's worker died: age its heartbeat and let reconcile hand the turn back."""


    from turnkit_django import reconcile

    expire_lease(turn_id)
    assert turn_id in reconcile().recovered


def fan_out_and_join(root_id: str, capture: Callable[..., Any]) -> list[Turn]:
    """Run a background root until it waits, then its children (newest first, so they finish
    out of call order), then the root again; return the children in creation order.
    ``capture`` is pytest-django's ``django_capture_on_commit_callbacks``."""
    with capture(execute=True):
        services.run_turn(root_id)
    children = list(Turn.objects.filter(parent_turn_id=root_id).order_by("created_at"))
    for child in reversed(children):
        with capture(execute=True):
            services.run_turn(child.pk)
    with capture(execute=True):
        services.run_turn(root_id)
    return children


#: What :func:`ping` was called with (cleared by the tests that use it).
pings: list[int] = []


@tool
def ping(n: int) -> dict[str, int]:
    """Ping."""
    pings.append(n)
    return {"n": n}


def ping_six_times(request: ModelRequest) -> Entry:
    """A sub-agent's model that pings six times, then answers (its own limits stop it first)."""
    done = sum(1 for m in request.messages if m.role == "tool")
    return call("ping", n=done) if done < 6 else reply("kid done")


__all__ = [
    "DENIALS",
    "allow",
    "answering",
    "crash_at",
    "deny",
    "fan_out_and_join",
    "ping",
    "ping_six_times",
    "pings",
    "policy",
    "policy_calls",
    "recover",
    "scripted",
    "selective",
    "snapshot",
    "tenant_policy",
    "tenant_recorded",
    "tool_results",
    "truthy_one",
    "truthy_yes",
]
