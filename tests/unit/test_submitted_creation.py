"""A root turn handed to the background as it is created (``agent.submit(task)``,
``conversation.ask(text, submit=True)``) is written as ``submit()`` would have written it.

On SQLite here; tests/integration/test_background_cost.py checks the same on PostgreSQL, where
it is one statement.
"""

from __future__ import annotations

from datetime import timedelta

import pytest

from turnkit_django import Agent
from turnkit_django.models import Event, Message, Turn
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize("how", ["agent.submit", "ask(submit=True)"])
def test_the_turn_is_submitted_with_its_input_and_rung_after_the_commit(
        how, registered, turnkit_dispatcher, django_capture_on_commit_callbacks):
    agent = registered(Agent("submitted_probe", client=FunctionClient(lambda r: reply("ok"))))
    conversation = agent.conversation()
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        handle = (agent.submit("task") if how == "agent.submit"
                  else conversation.ask("task", submit=True))
    assert turnkit_dispatcher.dispatched() == []  # not before the commit
    for callback in callbacks:
        callback()
    assert turnkit_dispatcher.dispatched() == [handle.id]
    row = Turn.objects.get(pk=handle.id)
    assert row.status == "pending" and row.submitted_at is not None
    assert row.updated_at == row.submitted_at
    assert row.deadline_at == row.submitted_at + timedelta(seconds=300)
    assert (handle.row.submitted_at, handle.row.deadline_at) == (row.submitted_at,
                                                                 row.deadline_at)
    (message,) = Message.objects.filter(conversation_id=row.conversation_id)
    assert row.context_sequence == message.sequence
    assert Event.objects.filter(root_turn_id=row.pk, type="message.created").count() == 1
    turnkit_dispatcher.run_dispatched()
    assert Turn.objects.get(pk=handle.id).status == "completed"
