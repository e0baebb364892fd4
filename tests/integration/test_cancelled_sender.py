"""A message from a turn a cascade cancel reached wakes nothing, also under a finished root.

messages-and-waits.md: a message a model sent joins the sender's tree, and "a message from a
cancelled tree wakes nothing". cancel(cascade=True) of a run that already finished cancels the
descendants it left running; what they sent must not start new work in the tree either.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import answering
from turnkit_django import Agent, services, store
from turnkit_django.messages import TextPart
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import send_message

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def test_a_cascade_cancelled_senders_buffered_message_wakes_nothing(
        registered, django_capture_on_commit_callbacks):
    inbox = registered(answering("listener", "heard")).conversation()
    holding = inbox.ask("hold", submit=True)
    assert store.claim_turn(holding.id, "a-worker") is not None  # the inbox is busy

    run = registered(answering("lead")).submit("start")
    assert services.run_turn(run.id) and run.refresh().status == "completed"

    def respond(request: Any) -> Any:
        if request.last_message_is_tool_result():  # sent: the operator stops the whole run
            services.cancel(run.id, cascade=True)
            return reply("too late")
        return call("send_message", conversation_id=inbox.id, text="more work")

    sender = registered(Agent("sender", tools=[send_message], client=FunctionClient(respond)))
    child = services.submit(services.new_turn(sender, [TextPart("go")], parent=run.row))
    with django_capture_on_commit_callbacks(execute=True):
        services.run_turn(child.pk)
    assert Turn.objects.get(pk=child.pk).status == "cancelled"
    assert len(inbox.messages()) == 2  # "hold" and the buffered message

    with django_capture_on_commit_callbacks(execute=True):
        services.cancel(holding.id)  # the inbox is free: its lane wakes for what it buffered
    assert list(inbox.turns().values_list("pk", flat=True)) == [holding.id]
    assert not Turn.objects.filter(root_turn_id=run.id).active().exists()
