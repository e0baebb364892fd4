"""Idempotency conflicts: DeliveryConflict (send_message, post) and KeyConflict (ask, say,
steer) share one base, and each names the key the caller gave."""

from __future__ import annotations

import pytest

from turnkit_django import (
    Agent,
    DeliveryConflict,
    IdempotencyConflict,
    KeyConflict,
    TurnkitError,
)
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def test_both_conflicts_are_idempotency_conflicts():
    assert issubclass(DeliveryConflict, IdempotencyConflict)
    assert issubclass(KeyConflict, IdempotencyConflict)
    assert issubclass(IdempotencyConflict, TurnkitError)
    assert not issubclass(DeliveryConflict, KeyConflict)
    assert not issubclass(KeyConflict, DeliveryConflict)


def test_one_except_clause_catches_a_reused_key_of_any_input(registered):
    agent = registered(Agent("conflicts", client=FunctionClient(lambda r: reply("ok"))))
    conv = agent.conversation()
    other = agent.conversation()
    conv.say("first", key="k")
    conv.send_message(other, "hello", key="conflicts:k")
    caught: list[IdempotencyConflict] = []
    for attempt in (lambda: conv.say("second", key="k"),
                    lambda: conv.ask("second", key="k"),
                    lambda: conv.send_message(other, "bye", key="conflicts:k")):
        with pytest.raises(IdempotencyConflict) as raised:
            attempt()
        caught.append(raised.value)
    assert [type(exc) for exc in caught] == [KeyConflict, KeyConflict, DeliveryConflict]
    assert [exc.key for exc in caught] == ["k", "k", "conflicts:k"]


def test_a_post_conflict_names_the_callers_key_not_the_stored_one(registered):
    agent = registered(Agent("post_conflicts", client=FunctionClient(lambda r: reply("ok"))))
    conv = agent.conversation()
    conv.post("Also check order 43.", key="msg-9")
    with pytest.raises(DeliveryConflict) as raised:
        conv.post("Also check order 44.", key="msg-9")
    assert raised.value.key == "msg-9"
    assert "'msg-9'" in str(raised.value)
    assert "post:" not in str(raised.value) and conv.id not in str(raised.value)
