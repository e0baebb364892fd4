"""The stream of a run ends when its whole tree is done, not when its root is: a continuation
a delivery woke joins the tree after the root finished, and its events belong to the run."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.test import AsyncClient

from tests.dispatch import clear
from tests.unit.test_tenant_tree import escalation
from turnkit_django import services
from turnkit_django.console.views import EventStream

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


async def _read(response) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]


def _stream(client: AsyncClient, run_id: str, after: int = 0) -> str:
    response = async_to_sync(client.get)(f"/turnkit/runs/{run_id}/events", {"after": after})
    return b"".join(async_to_sync(_read)(response)).decode()


def test_the_stream_keeps_a_run_open_while_a_continuation_of_its_tree_is_active(
        registered, django_capture_on_commit_callbacks, monkeypatch):
    user = get_user_model().objects.create_user("sender", password="x")
    desk_conv, cust = escalation(registered)
    with django_capture_on_commit_callbacks(execute=True):
        run = cust.submit("help", principal={"user": user.pk})
    clear()
    services.run_turn(run.id)  # the delivery wakes the helpdesk: its turn joins the tree
    (cont,) = [t for t in desk_conv.turns() if t.root_turn_id == run.id]
    assert run.refresh().status == "completed" and cont.status == "pending"
    client = AsyncClient()
    client.force_login(user)
    monkeypatch.setattr(EventStream, "max_seconds", 0.3)
    monkeypatch.setattr(EventStream, "poll_interval", 0.05)

    assert "event: end" not in _stream(client, run.id)  # closes at max_seconds, no end

    services.run_turn(cont.pk)
    cont.refresh_from_db()
    assert cont.status == "completed"
    body = _stream(client, run.id)
    assert "event: end" in body
