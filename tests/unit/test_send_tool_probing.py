"""The ``send_message`` tool does not tell a model which conversation ids exist.

A model picks the ``conversation_id`` itself. With a policy, an id that names no conversation
is asked about like any destination (its owner unknown): a policy that refuses it gives the
same refusal as for another tenant's conversation, so the model cannot probe which ids exist.
Without a policy (a trusted application) an unknown id is still "unknown_conversation".
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import override_turnkit
from tests.orchestration import tool_results
from turnkit_django import Agent
from turnkit_django.models import Delivery
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import send_message

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def sender(registered: Any, *targets: str) -> Agent:
    calls = [call("send_message", id=f"c{n}", conversation_id=target, text="hello")
             for n, target in enumerate(targets)]

    def respond(request: Any) -> Any:
        return calls if request.last_message_is_user() else reply("sent")

    return registered(Agent("sender", tools=[send_message], client=FunctionClient(respond)))


def test_a_missing_and_a_foreign_conversation_are_refused_alike(registered: Any) -> None:
    other = registered(Agent("other", client=FunctionClient(lambda r: reply("x"))))
    foreign = other.conversation(principal={"tenant": "globex", "user": 2})
    agent = sender(registered, foreign.id, "conv_01NOSUCHCONVERSATION00000")
    with override_turnkit(AUTHORIZATION_POLICY="tests.orchestration.tenant_policy"):
        run = agent.run("send", principal={"tenant": "acme", "user": 1})
    (_c0, error0, first), (_c1, error1, second) = tool_results(run.id)
    assert error0 and error1
    assert first["error"] == second["error"] == "not_authorized"
    assert first["message"].replace(foreign.id, "ID") == second["message"].replace(
        "conv_01NOSUCHCONVERSATION00000", "ID")
    assert not Delivery.objects.exists()


def test_without_a_policy_an_unknown_conversation_is_named(registered: Any) -> None:
    run = sender(registered, "conv_missing").run("send")
    ((_c, error, content),) = tool_results(run.id)
    assert error and content["error"] == "unknown_conversation"
