"""The admin shows turnkit rows read-only, with a readable transcript and the turn's tree."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.urls import reverse

from turnkit_django import Agent, tool
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = pytest.mark.django_db


@tool
def lookup(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id, "status": "shipped"}


@pytest.fixture
def staff_client(client):
    user = User.objects.create_superuser("admin", "admin@example.com", "pw")
    client.force_login(user)
    return client


def test_turn_pages_render_the_transcript_and_refuse_edits(staff_client):
    agent = Agent("admin_probe", tools=[lookup], client=ScriptedClient(
        [call("lookup", order_id="42"), reply("It shipped.")]))
    run = agent.run("Where is order 42?")
    change = staff_client.get(reverse("admin:turnkit_turn_change", args=[run.id]))
    assert change.status_code == 200
    body = change.content.decode()
    assert "lookup" in body and "It shipped." in body and "admin_probe" in body
    assert staff_client.get(reverse("admin:turnkit_turn_changelist")).status_code == 200
    assert staff_client.get(reverse("admin:turnkit_turn_add")).status_code == 403
    conversation = staff_client.get(
        reverse("admin:turnkit_conversation_change", args=[run.conversation_id]))
    assert conversation.status_code == 200 and "Where is order 42?" in conversation.content.decode()
    posted = staff_client.post(reverse("admin:turnkit_turn_delete", args=[run.id]), {"post": "yes"})
    assert posted.status_code == 403
    run.refresh()
    assert run.status == "completed"


@pytest.mark.parametrize("model", ["toolexecution", "delivery", "wait", "conversation"])
def test_every_model_has_a_changelist(staff_client, model):
    assert staff_client.get(reverse(f"admin:turnkit_{model}_changelist")).status_code == 200
