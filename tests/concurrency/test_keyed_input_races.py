"""Keyed input retried at the same moment (a double click, two replicas retrying a request).

``conv.ask(text, key=...)`` and ``conv.say(text, key=...)`` append the input once per key in
the conversation, and a retry returns what the first call made (guarantees P2). Two calls with
one key released together must both get that answer: one message, one turn, no database error.
"""

from __future__ import annotations

from functools import partial

import pytest

from tests.concurrency.threads import Race
from turnkit_django import Agent
from turnkit_django.models import Message, Turn
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


@pytest.mark.parametrize(("submit", "rounds"), [(True, 60), (False, 30)],
                         ids=["submitted", "inline"])
def test_an_ask_retried_at_the_same_moment_appends_once_and_both_get_its_turn(
        registered, submit, rounds):
    agent = registered(Agent(f"keyed-{submit}", client=FunctionClient(lambda r: reply("ok"))))
    conv = agent.conversation()
    with Race(2) as race:
        for round_ in range(rounds):
            ask = partial(conv.ask, f"question {round_}", key=f"req-{round_}", submit=submit)
            first, second = race.round([ask, ask])
            assert first.id == second.id, f"round {round_}"
    assert Message.objects.filter(conversation_id=conv.id, role="user").count() == rounds
    turns = Turn.objects.filter(conversation_id=conv.id)
    assert turns.count() == rounds
    if not submit:  # each ran once, inline
        assert set(turns.values_list("status", flat=True)) == {"completed"}


def test_a_say_retried_at_the_same_moment_appends_once(registered):
    agent = registered(Agent("said", client=FunctionClient(lambda r: reply("ok"))))
    conv = agent.conversation()
    with Race(2) as race:
        for round_ in range(60):
            say = partial(conv.say, f"note {round_}", key=f"say-{round_}")
            first, second = race.round([say, say])
            assert first.pk == second.pk, f"round {round_}"
    assert Message.objects.filter(conversation_id=conv.id).count() == 60
