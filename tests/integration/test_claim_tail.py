"""A background claim reads the messages its turn sees from the input on (issue 11).

The claim's one read brings the turn's last input message and its own messages with the row,
so a turn whose earlier history this process holds (or that has none) sends no read of the
transcript. What the model is shown must be the same as with the read: the earlier history of a
conversation this process never saw, and the own messages of a turn that resumes.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from turnkit_django import Agent, services, store
from turnkit_django.messages import TextPart
from turnkit_django.store.seen import SEEN
from turnkit_django.testing import FunctionClient, reply

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


class Seen:
    """A model that answers at once and keeps the texts of every request."""

    def __init__(self) -> None:
        self.requests: list[list[str]] = []

    def __call__(self, request: Any) -> Any:
        self.requests.append([part.text for m in request.messages for part in m.parts
                              if isinstance(part, TextPart)])
        return reply(f"answer {len(self.requests)}")


def test_a_conversation_this_process_never_saw_is_read_in_full(registered):
    model = Seen()
    agent = registered(Agent("tail_history", client=FunctionClient(model)))
    conversation = agent.conversation()
    first = conversation.ask("one", submit=True)
    assert services.run_turn(first.id, kind="test")
    second = conversation.ask("two", submit=True)
    SEEN.clear()  # another worker process runs the second turn
    assert services.run_turn(second.id, kind="test")
    assert model.requests[-1] == ["one", "answer 1", "two"]


@pytest.mark.parametrize("cached", [True, False], ids=["history-held", "history-not-held"])
def test_a_resumed_turn_sees_its_own_messages(registered, cached):
    model = Seen()
    agent = registered(Agent("tail_resume", client=FunctionClient(model)))
    run = agent.prepare("task").submit()
    claim, _, ledger = store.claim_turn(run.id, "earlier-worker")  # type: ignore[misc]
    fenced = store.Fenced(claim, ledger)
    with fenced.atomic():  # the earlier worker said something, then gave the turn back
        fenced.append("assistant", [TextPart("a note from before")])
        fenced.hand_back([])
    if not cached:
        SEEN.clear()
    assert services.run_turn(run.id, kind="test")
    assert model.requests == [["task", "a note from before"]]
    assert run.refresh().status == "completed"
