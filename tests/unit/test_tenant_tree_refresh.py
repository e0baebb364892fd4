"""A stream decides the tree's conversations as they appear (``Readable.refresh``, polled by the
SSE view); a turn acting for another principal that joins a conversation already decided has
the policy asked again, with the grown ``turn_principals``.

A customer asks in the helpdesk's room (the turn acts for the customer); the room's agent
leaves itself a note, which wakes a continuation in the room acting for the room's principal
(the helpdesk) inside the customer's tree.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import override_turnkit
from tests.helpers import run_all
from turnkit_django import Agent
from turnkit_django.services import Readable
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import send_message

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

CUSTOMER = {"tenant": "t1", "user": 1}
DESK = {"tenant": "helpdesk", "user": 99}
POLICY = "tests.unit.test_tenant_tree_refresh.own_turns"
asked: list[dict[str, Any]] = []


def own_turns(action: str, *, principal: Any, **resources: Any) -> bool:
    """A reader reads a conversation in which every turn of the tree acts for their tenant."""
    if action != "read_messages":
        return True
    asked.append(resources)
    return all(p.get("tenant") == principal["tenant"] for p in resources["turn_principals"])


def helpdesk_room(registered):
    def respond(request):
        if request.last_message_is_tool_result():
            return reply("noted")
        if "customer:" in request.messages[-1].text:
            return call("send_message", conversation_id=room.id,
                        text="internal: SECRET refund notes")
        return reply("SECRET refund notes, as the helpdesk")

    agent = registered(Agent("room", tools=[send_message], client=FunctionClient(respond)))
    room = agent.conversation(principal=DESK)
    return room


def test_a_turn_of_another_principal_has_its_conversation_decided_again(
        registered, django_capture_on_commit_callbacks, django_assert_num_queries):
    asked.clear()
    room = helpdesk_room(registered)
    with override_turnkit(AUTHORIZATION_POLICY=POLICY):
        with django_capture_on_commit_callbacks(execute=True):
            run = room.ask("customer: where is my refund?", submit=True, principal=CUSTOMER)
        shown = Readable(run.id, CUSTOMER)
        assert shown.refresh() == {room.id}  # the customer's own turn only
        assert [r["turn_principals"] for r in asked] == [[CUSTOMER]]

        asked.clear()
        with django_assert_num_queries(1):
            assert shown.refresh() == {room.id}
        assert asked == []  # nothing changed: not asked again

        run_all(django_capture_on_commit_callbacks)
        (woken,) = [t for t in room.turns() if t.pk != run.id]
        assert woken.root_turn_id == run.id and woken.principal == DESK
        with django_assert_num_queries(1):
            assert shown.refresh() == set()  # the helpdesk's turn joined the room
        assert [r["turn_principals"] for r in asked] == [[CUSTOMER, DESK]]

        asked.clear()
        assert shown.refresh() == set()
        assert asked == []  # refused stays refused, without asking
