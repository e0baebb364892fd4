"""Public functions refuse unusable arguments with an error saying what to pass (api.md)."""

from __future__ import annotations

import pytest

from turnkit_django import (
    Agent,
    ConfigurationError,
    InputError,
    pending_approvals,
    register,
    tool,
)
from turnkit_django.models import Conversation, Turn
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


@pytest.mark.parametrize("model", [5, "", "  ", "m" * 201, ["claude"], " claude", "claude\n"])
def test_an_agent_refuses_a_model_that_is_no_model_name(model: object) -> None:
    with pytest.raises(ConfigurationError, match=r"agent 'modelled_c': model"):
        Agent("modelled_c", model=model)  # type: ignore[arg-type]


@pytest.mark.parametrize("model", [5, "", "m" * 201, "claude "])
def test_a_run_refuses_a_model_that_is_no_model_name_before_writing(model: object) -> None:
    agent = Agent("modelled_run_c", client=FunctionClient(lambda request: reply("ok")))
    with pytest.raises(InputError, match="model="):
        agent.run("hi", model=model)  # type: ignore[arg-type]
    with pytest.raises(InputError, match="model="):
        agent.conversation(model=model)  # type: ignore[arg-type]
    assert not Turn.objects.exists() and not Conversation.objects.exists()


def test_a_model_name_is_kept() -> None:
    agent = Agent("modelled_ok_c", model="claude-x", client=FunctionClient(lambda r: reply("ok")))
    assert agent.run("hi", model="gpt-y").turn.row.model == "gpt-y"


def test_flags_are_true_or_false_not_any_truthy_value() -> None:
    """``cancel(cascade="no")`` cascaded and ``ask(..., submit="no")`` submitted: refused."""
    agent = Agent("flagged_c", client=FunctionClient(lambda request: reply("ok")))
    run = agent.prepare("later")
    for attempt in (lambda: run.cancel(cascade="no"), lambda: run.pause(cascade=1),
                    lambda: run.resume(cascade="no"),
                    lambda: run.steer("t", key="k", descendants="no")):
        with pytest.raises(InputError, match="True or False"):
            attempt()
    assert Turn.objects.get(pk=run.id).status == "pending"
    conversation = agent.conversation()
    with pytest.raises(InputError, match="submit= must be True or False"):
        conversation.ask("hi", submit="no")  # type: ignore[arg-type]
    assert not conversation.turns().exists()
