"""Delivery keys are store-wide, and turnkit makes some itself: ``completion:<turn id>`` (a
turn's completion callback), ``post:<conversation id>:<key>`` (``conv.post``) and
``turnkit:send:<execution id>`` (the ``send_message`` tool). An application key in those
namespaces (an idempotency key a client chose, say) could take one of them first: the callback
of another principal's turn then failed its terminal write (the turn stayed ``running``), and
that conversation's ``post`` raised DeliveryConflict. ``conv.send_message`` refuses them."""

from __future__ import annotations

from typing import Any

import pytest

from tests.helpers import run_all
from turnkit_django import Agent, InputError
from turnkit_django.models import Delivery
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


@pytest.fixture
def agent(registered: Any) -> Agent:
    return registered(Agent("keys", client=FunctionClient(lambda request: reply("the result"))))


def test_a_completion_key_is_refused_and_the_callback_arrives(
        agent: Agent, django_capture_on_commit_callbacks: Any) -> None:
    inbox = agent.conversation(principal={"tenant": "b"})
    other = agent.conversation(principal={"tenant": "a"})
    with django_capture_on_commit_callbacks(execute=True):
        run = agent.submit("work", callback=inbox, principal={"tenant": "b"})
    with pytest.raises(InputError, match="reserve"):
        other.send_message(other, "spoof", key=f"completion:{run.id}")
    assert not Delivery.objects.exists()
    run_all(django_capture_on_commit_callbacks)
    assert run.refresh().status == "completed"
    (callback,) = inbox.inbox()
    assert callback.key == f"completion:{run.id}" and callback.delivered_at is not None


@pytest.mark.parametrize("prefix", ["post:{conv}:k1", "turnkit:send:x", "completion:x"])
def test_keys_in_turnkits_namespaces_are_refused(agent: Agent, prefix: str) -> None:
    victim = agent.conversation(principal={"tenant": "b"})
    other = agent.conversation(principal={"tenant": "a"})
    with pytest.raises(InputError):
        other.send_message(other, "spoof", key=prefix.format(conv=victim.id))
    assert not Delivery.objects.exists()
    victim.post("hello", key="k1")  # its own post key is free
    assert victim.input_status("k1").text == "hello"


def test_other_keys_still_work(agent: Agent) -> None:
    conv = agent.conversation()
    for key in ["req-1:post:x", "Completion:x", "my-turnkit:send"]:
        assert conv.send_message(conv, "hi", key=key).key == key
