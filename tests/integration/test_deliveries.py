"""Deliveries between conversations (issue 4; architecture section 7): keys, buffering, wake.

The destination agent is registered (a continuation is rebuilt from the registry, as a worker
would). Background turns run in this thread through ``services.run_turn``, as the Celery task does.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.dispatch import background, override_turnkit, recorded
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import DENIALS, answering, policy, policy_calls, snapshot
from turnkit_django import (
    Agent,
    AuthorizationError,
    Conversation,
    DeliveryConflict,
    load_conversation,
    services,
    tool,
)
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.events import delivery_delivered
from turnkit_django.messages import load_parts
from turnkit_django.models import Delivery, Message, Turn
from turnkit_django.runtime import deliveries as deliveries_module
from turnkit_django.testing import FunctionClient, call, reply

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

SENDER = {"tenant": "t1", "user": 1}
OWNER = {"tenant": "t1", "user": 2}


def texts(request: ModelRequest) -> list[str]:
    return [m.text for m in request.messages if m.role == "user"]


@pytest.fixture
def pair(registered) -> tuple[Conversation, Conversation]:
    sender = registered(answering("sender_agent"))
    inbox = registered(answering("inbox_agent", text="checked"))
    return sender.conversation(principal=SENDER), inbox.conversation(principal=OWNER)


@pytest.fixture
def delivered_events() -> Iterator[list[Any]]:
    seen: list[Any] = []

    def receive(sender: Any, event: Any, **kwargs: Any) -> None:
        seen.append(event)

    delivery_delivered.connect(receive)
    yield seen
    delivery_delivered.disconnect(receive)


def continuations(conversation: Conversation) -> list[Turn]:
    return list(conversation.turns().filter(options__has_key="woken_by"))


# --------------------------------------------------------------------------- delivering


def test_a_message_to_an_idle_conversation_is_delivered_once_with_one_continuation(
        pair, django_capture_on_commit_callbacks, delivered_events):
    source, destination = pair
    with django_capture_on_commit_callbacks(execute=True):
        delivery = source.send_message(destination, "Please check the results.",
                                       key="req-1:check", principal=SENDER)

    assert delivery.delivered_at is not None
    message = Message.objects.get(pk=delivery.message_id)
    assert (message.conversation_id, message.role) == (destination.id, "user")
    assert load_parts(message.content)[0].text == "Please check the results."
    assert message.metadata["delivery_id"] == delivery.pk
    assert message.metadata["sender_principal"] == SENDER
    assert message.metadata["source"] == {"conversation_id": source.id, "turn_id": None}
    (turn,) = continuations(destination)
    # It acts for the destination's principal, never the sender's, and is submitted.
    assert turn.principal == OWNER
    assert turn.status == "pending" and turn.submitted_at is not None
    assert turn.context_sequence == message.sequence
    assert recorded() == [turn.pk]
    (event,) = delivered_events
    assert event.payload["continuation_turn_id"] == turn.pk
    assert list(destination.inbox()) == [delivery] and list(source.outbox()) == [delivery]
    assert list(source.inbox()) == [] and list(destination.outbox()) == []

    assert services.run_turn(turn.pk)
    assert Turn.objects.get(pk=turn.pk).status == "completed"
    assert Turn.objects.get(pk=turn.pk).output_text == "checked"


def test_an_identical_retry_returns_the_same_delivery_and_writes_nothing(pair):
    source, destination = pair
    first = source.send_message(destination, "hello", key="k", principal=SENDER)
    before = snapshot()
    again = source.send_message(destination, "hello", key="k", principal=SENDER)
    assert again.pk == first.pk
    assert snapshot() == before
    assert Message.objects.filter(metadata__delivery_id=first.pk).count() == 1


@pytest.mark.parametrize("change", ["text", "destination", "principal"])
def test_different_content_under_a_used_key_raises_without_revealing_it(pair, registered,
                                                                       change):
    source, destination = pair
    source.send_message(destination, "the secret plan", key="shared", principal=SENDER)
    other = load_conversation(services.new_conversation(source.agent, principal=SENDER).pk)
    kwargs: dict[str, Any] = {"key": "shared", "principal": SENDER}
    target, text = destination, "the secret plan"
    if change == "text":
        text = "something else"
    elif change == "destination":
        target = other
    else:
        kwargs["principal"] = {"tenant": "t1", "user": 99}
    before = snapshot()
    with pytest.raises(DeliveryConflict) as caught:
        source.send_message(target, text, **kwargs)
    assert "secret" not in str(caught.value) and destination.id not in str(caught.value)
    assert "'shared'" in str(caught.value)
    assert snapshot() == before


def test_delivering_twice_appends_one_message(pair):
    source, destination = pair
    delivery = deliveries_module.send_message(source.row, destination.row, "once", key="k2",
                                              principal=SENDER, deliver_now=False)
    assert delivery.delivered_at is None and not continuations(destination)
    first = services.deliver(delivery.pk)
    second = services.deliver(delivery.pk)
    assert first.message_id == second.message_id
    assert Message.objects.filter(conversation_id=destination.id).count() == 1
    assert len(continuations(destination)) == 1


def test_a_busy_turns_input_is_never_changed_and_one_continuation_consumes_the_buffer(
        registered):
    requests: list[ModelRequest] = []
    holder: dict[str, Conversation] = {}

    @tool
    def check(ctx) -> str:
        """Meanwhile another conversation sends two messages to this one."""
        for n in (1, 2):
            holder["source"].send_message(holder["destination"], f"urgent note {n}",
                                          key=f"note-{n}", principal=SENDER)
        return "checked"

    def respond(request: ModelRequest) -> Any:
        requests.append(request)
        if request.messages[-1].role == "user" and texts(request) == ["start"]:
            return call("check", id="call_check")
        return reply("all done")

    registered(Agent("busy_agent", tools=[check], client=FunctionClient(respond)))
    holder["source"] = registered(answering("sender_agent")).conversation(principal=SENDER)
    destination = holder["destination"] = Agent("busy_agent").conversation(principal=OWNER)
    turn = destination.ask("start", submit=True)
    frozen = turn.row.context_sequence

    assert services.run_turn(turn.id)

    turn.refresh()
    assert turn.status == "completed" and turn.row.context_sequence == frozen
    # The running turn never saw the notes, before or after its tool ran.
    assert [texts(r) for r in requests] == [["start"], ["start"]]
    assert not any("urgent" in m.text for m in [*requests[1].messages])
    (continuation,) = continuations(destination)
    assert continuation.principal == OWNER and continuation.submitted_at is not None
    assert services.run_turn(continuation.pk)
    assert texts(requests[-1]) == ["start", "urgent note 1", "urgent note 2"]
    # Nothing is left to consume: a new wake creates nothing.
    assert deliveries_module.wake(destination.id) is None
    assert len(continuations(destination)) == 1


def test_after_an_inline_turn_the_continuation_is_prepared_not_submitted(pair):
    source, destination = pair
    destination.ask("hello")
    source.send_message(destination, "first", key="a", principal=SENDER)
    source.send_message(destination, "second", key="b", principal=SENDER)
    (continuation,) = continuations(destination)
    assert continuation.status == "pending" and continuation.submitted_at is None
    # The prepared continuation holds the first note (#3, after "hello" and the reply); the
    # second is buffered for the turn after it.
    assert continuation.context_sequence == 3
    assert destination.messages(after=3).get().metadata["delivery_id"]


def test_maintenance_delivers_pending_deliveries_in_bounded_rotating_batches(pair, monkeypatch):
    source, destination = pair
    made = [deliveries_module.send_message(source.row, destination.row, f"n{i}", key=f"m{i}",
                                           principal=SENDER, deliver_now=False)
            for i in range(3)]
    real = deliveries_module.deliver

    def flaky(delivery_id: str) -> Delivery:
        if delivery_id == made[0].pk:
            raise RuntimeError("this one keeps failing")
        return real(delivery_id)

    monkeypatch.setattr(deliveries_module, "deliver", flaky)
    deliveries_module._Rotation.after = None
    passes = []
    with override_turnkit(MAINTENANCE_BATCH_SIZE=1):
        for _ in range(3):
            services.drain()
            passes.append(Delivery.objects.pending().count())
    # The failing head does not starve the others: one delivery per pass gets through.
    assert passes == [3, 2, 1]
    assert list(Delivery.objects.pending()) == [made[0]]


def test_cancel_wakes_a_conversation_with_buffered_deliveries(pair):
    source, destination = pair
    blocker = destination.ask("long job", submit=True)
    source.send_message(destination, "while you were busy", key="w", principal=SENDER)
    assert not continuations(destination)
    blocker.cancel()
    (continuation,) = continuations(destination)
    assert continuation.principal == OWNER and continuation.submitted_at is not None


# --------------------------------------------------------------------------- authorization


def test_send_message_asks_the_policy_with_both_conversations(pair, policy_calls):
    source, destination = pair
    with policy("tests.orchestration.allow"):
        source.send_message(destination, "hi", key="p1", principal=SENDER)
    ((_, principal, resources),) = [c for c in policy_calls if c[0] == "send_message"]
    assert principal == SENDER
    assert resources["source_conversation_id"] == source.id
    assert resources["destination_conversation_id"] == destination.id
    assert resources["destination_principal"] == OWNER


@pytest.mark.parametrize("path", DENIALS)
def test_a_denied_send_message_raises_and_writes_nothing(pair, path):
    source, destination = pair
    before = snapshot()
    with policy(path), pytest.raises(AuthorizationError):
        source.send_message(destination, "hi", key="p2", principal=SENDER)
    assert snapshot() == before


def test_the_multi_tenant_policy_keeps_tenants_apart(pair, registered):
    source, destination = pair
    stranger = load_conversation(services.new_conversation(
        destination.agent, principal={"tenant": "t2", "user": 5}).pk)
    with policy("tests.orchestration.tenant_policy"):
        source.send_message(destination, "same tenant", key="t-ok", principal=SENDER)
        before = snapshot()
        with pytest.raises(AuthorizationError):
            source.send_message(stranger, "other tenant", key="t-no", principal=SENDER)
        assert snapshot() == before
        with pytest.raises(AuthorizationError):
            list(stranger.messages(principal=SENDER))
        assert list(destination.messages(principal=SENDER))


@pytest.mark.parametrize("path", DENIALS)
def test_reading_messages_with_a_principal_is_authorized(pair, path):
    source, destination = pair
    source.send_message(destination, "hi", key="r", principal=SENDER)
    with policy(path):
        for read in (destination.messages, destination.inbox, destination.outbox):
            with pytest.raises(AuthorizationError):
                read(principal=OWNER)
        # Trusted server code that passes no principal is not asked.
        assert destination.messages().count() == 1
    with policy("tests.orchestration.allow"):
        assert destination.messages(principal=OWNER).count() == 1
        assert destination.inbox(principal=OWNER).count() == 1
