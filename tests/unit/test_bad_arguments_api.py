"""Public functions refuse unusable arguments with an error saying what to pass (api.md)."""

from __future__ import annotations

import pytest

from turnkit_django import Agent, InputError, pending_approvals, register, tool
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("limit", [-1, 0, True, "5", 2.5])
def test_pending_approvals_refuses_a_limit_that_is_no_positive_int(limit: object) -> None:
    with pytest.raises(InputError, match="limit"):
        pending_approvals(limit=limit)


@pytest.mark.parametrize("scope", ["root_id", "turn_id"])
def test_pending_approvals_refuses_an_id_that_is_no_str(scope: str) -> None:
    with pytest.raises(InputError, match=scope):
        pending_approvals(**{scope: 5})


def test_pending_approvals_takes_a_positive_limit() -> None:
    assert pending_approvals(limit=3) == []


@tool
def ping_c() -> str:
    """Ping."""
    return "pong"


@pytest.mark.parametrize("value", ["support", Agent, ping_c, None])
def test_register_refuses_what_is_no_agent(value: object) -> None:
    with pytest.raises(TypeError, match=r"register\(\) takes an Agent"):
        register(value)  # type: ignore[type-var]


def test_register_returns_the_agent() -> None:
    agent = Agent("registered_c", client=FunctionClient(lambda request: reply("ok")))
    assert register(agent) is agent
