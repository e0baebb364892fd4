"""The SSE view under ``ATOMIC_REQUESTS = True``: Django refuses to wrap an async view in the
request's transaction, so turnkit's stream opts out of it (it failed with a 500 at every
request)."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import AsyncClient

from turnkit_django import Agent
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def atomic_requests(monkeypatch):
    monkeypatch.setitem(connections.settings["default"], "ATOMIC_REQUESTS", True)


def test_the_event_stream_answers_under_atomic_requests(registered, atomic_requests):
    user = get_user_model().objects.create_user("reader", password="x")
    agent = registered(Agent("streamed", client=FunctionClient(lambda request: reply("ok"))))
    run = agent.run("go", principal={"user": user.pk})
    client = AsyncClient()
    client.force_login(user)

    response = async_to_sync(client.get)(f"/turnkit/runs/{run.id}/events")
    assert response.status_code == 200
    body = b"".join(async_to_sync(_read)(response))
    assert b"event: turn.completed" in body and b"event: end" in body

    missing = async_to_sync(client.get)("/turnkit/runs/turn_missing/events")
    assert missing.status_code == 404


async def _read(response) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]
