"""A continuation woken in another principal's conversation joins the sender's tree (it shares
the sender's budget) but acts for the destination's principal: reads of the run show only what
the reader may read, and the sender can still cancel its run with every descendant (P7)."""

from __future__ import annotations

from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.test import AsyncClient

from tests.dispatch import override_turnkit
from tests.helpers import run_all
from turnkit_django import Agent, AuthorizationError
from turnkit_django.models import Event
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import send_message

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

T1 = {"tenant": "t1", "user": 1}
T2 = {"tenant": "t2", "user": 2}
DESK = {"tenant": "helpdesk", "user": 99}
POLICY = "tests.unit.test_tenant_tree.policy"
asked: list[tuple[str, dict[str, Any]]] = []


def policy(action: str, *, principal: Any, **resources: Any) -> bool:
    """Tenants are isolated, except that anyone may message the helpdesk."""
    asked.append((action, resources))
    if action == "send_message" and (resources.get("destination_principal") or {}).get(
            "tenant") == "helpdesk":
        return True
    owners = [v for k, v in resources.items() if k.endswith("_principal")]
    for k, v in resources.items():
        if k.endswith("_principals"):
            owners.extend(v)
    return isinstance(principal, dict) and all(
        isinstance(o, dict) and o.get("tenant") == principal.get("tenant") for o in owners)


def escalation(registered, desk_reply: str = "SECRET helpdesk notes"):
    """A helpdesk conversation and a customer agent whose tool messages it."""
    desk = registered(Agent("desk", client=FunctionClient(lambda r: reply(desk_reply))))
    desk_conv = desk.conversation(principal=DESK)

    def customer(request):
        if request.last_message_is_tool_result():
            return reply("escalated")
        return call("send_message", conversation_id=desk_conv.id,
                    text=f"from user: {request.messages[0].text}")

    cust = registered(Agent("cust", tools=[send_message], client=FunctionClient(customer)))
    return desk_conv, cust


def test_run_reads_show_only_conversations_the_principal_may_read(
        registered, django_capture_on_commit_callbacks):
    desk_conv, cust = escalation(registered)
    with override_turnkit(AUTHORIZATION_POLICY=POLICY):
        with django_capture_on_commit_callbacks(execute=True):
            cust.submit("T2 PRIVATE: my card is 4111", principal=T2)
        run_all(django_capture_on_commit_callbacks)
        with django_capture_on_commit_callbacks(execute=True):
            run = cust.submit("t1 question", principal=T1)
        run_all(django_capture_on_commit_callbacks)
        (cont,) = [t for t in desk_conv.turns() if t.root_turn_id == run.id]
        assert cont.status == "completed" and cont.principal == DESK
        assert Event.objects.filter(root_turn_id=run.id, conversation_id=desk_conv.id).exists()

        asked.clear()
        events = list(run.events(principal=T1))
        reads = [r for a, r in asked if a == "read_messages"]
        assert sorted(r["conversation_id"] for r in reads) == sorted(
            [run.row.conversation_id, desk_conv.id])  # once per distinct conversation
        assert events and {e.conversation_id for e in events} == {run.row.conversation_id}
        assert "SECRET" not in str([e.payload for e in events])

        asked.clear()
        mine = list(run.messages(principal=T1))
        assert len([a for a, _ in asked if a == "read_messages"]) == 2
        assert mine and {m.conversation_id for m in mine} == {run.row.conversation_id}

        # Without a principal (trusted code): the tree's own turns, never the helpdesk's
        # history from before the tree (tenant 2's escalation).
        everything = [str(m.content) for m in run.messages()]
        assert not [text for text in everything if "T2 PRIVATE" in text]
        assert [text for text in everything if "from user: t1 question" in text]
        assert [text for text in everything if "SECRET helpdesk notes" in text]
        assert len(list(run.events())) > len(events)

        with pytest.raises(AuthorizationError):
            run.events(principal=DESK)  # the run's own conversation is tenant 1's
        with pytest.raises(AuthorizationError):
            run.messages(principal=T2)


def test_the_event_stream_shows_only_readable_conversations(
        registered, django_capture_on_commit_callbacks):
    user = get_user_model().objects.create_user("t1", password="x")
    desk_conv, cust = escalation(registered)
    me = {"tenant": "t1", "user": user.pk}
    with override_turnkit(AUTHORIZATION_POLICY="tests.unit.test_tenant_tree.stream_policy"):
        with django_capture_on_commit_callbacks(execute=True):
            run = cust.submit("t1 question", principal=me)
        run_all(django_capture_on_commit_callbacks)
        assert Event.objects.filter(root_turn_id=run.id, conversation_id=desk_conv.id).exists()
        client = AsyncClient()
        client.force_login(user)
        response = async_to_sync(client.get)(f"/turnkit/runs/{run.id}/events")
        assert response.status_code == 200
        body = b"".join(async_to_sync(_read)(response)).decode()
        assert "event: turn.completed" in body and "event: end" in body
        assert desk_conv.id not in body and "SECRET" not in body


def test_without_a_policy_the_stream_shows_the_users_own_turns(
        registered, django_capture_on_commit_callbacks):
    user = get_user_model().objects.create_user("own", password="x")
    desk_conv, cust = escalation(registered)
    with django_capture_on_commit_callbacks(execute=True):
        run = cust.submit("t1 question", principal={"user": user.pk})
    run_all(django_capture_on_commit_callbacks)
    client = AsyncClient()
    client.force_login(user)
    body = b"".join(async_to_sync(_read)(async_to_sync(client.get)(
        f"/turnkit/runs/{run.id}/events"))).decode()
    assert "event: end" in body and run.row.conversation_id in body
    assert desk_conv.id not in body and "SECRET" not in body


def stream_policy(action: str, *, principal: Any, **resources: Any) -> bool:
    """The views' principal is ``{"user": pk}``: give it the tenant of tenant 1's user."""
    return policy(action, principal={**principal, "tenant": "t1"}, **resources)


async def _read(response) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]
