"""Bad input to public entry points is refused with an error that says what to pass, before
anything is written (an audit of send_message, paint/view_media, Agent options and register)."""

from __future__ import annotations

import pytest

from turnkit_django import Agent, InputError
from turnkit_django.models import Conversation, Delivery, Message, Turn
from turnkit_django.testing import ScriptedClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]


def rows() -> tuple[int, int, int, int]:
    return (Conversation.objects.count(), Turn.objects.count(), Message.objects.count(),
            Delivery.objects.count())


def quiet(name: str = "quiet") -> Agent:
    return Agent(name, client=ScriptedClient([reply("ok")] * 5))


@pytest.mark.parametrize("key", [None, 5, "", "   ", "k" * 256, "a\x00b", "\ud800"])
def test_send_message_refuses_an_unusable_key_with_input_error(key):
    agent = quiet()
    source, destination = agent.conversation(), agent.conversation()
    before = rows()
    with pytest.raises(InputError, match="key="):
        source.send_message(destination, "hello", key=key)
    assert rows() == before


def test_send_message_keeps_accepting_keys_up_to_the_column_length():
    agent = quiet()
    source, destination = agent.conversation(), agent.conversation()
    assert source.send_message(destination, "hello", key="k" * 255).key == "k" * 255


@pytest.mark.parametrize("source_turn", [5, "turn_x", object()])
def test_send_message_refuses_a_source_turn_that_is_no_turn(source_turn):
    agent = quiet()
    source, destination = agent.conversation(), agent.conversation()
    before = rows()
    with pytest.raises(InputError, match="source_turn="):
        source.send_message(destination, "hello", key="k1", source_turn=source_turn)
    assert rows() == before


def test_send_message_refuses_a_source_turn_of_another_conversation():
    agent = quiet()
    source, destination = agent.conversation(), agent.conversation()
    elsewhere = agent.prepare("go")
    before = rows()
    with pytest.raises(InputError, match="source_turn="):
        source.send_message(destination, "hello", key="k1", source_turn=elsewhere)
    assert rows() == before

