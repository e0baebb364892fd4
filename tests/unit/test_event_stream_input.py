"""What the event stream and ``run.events()`` answer to a cursor or a limit they cannot use."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.test import AsyncClient

from turnkit_django import Agent, InputError
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def streamed(registered):
    """A finished run of a logged-in user, and that user's client."""
    user = get_user_model().objects.create_user("reader", password="x")
    agent = registered(Agent("streamed", client=FunctionClient(lambda request: reply("ok"))))
    run = agent.run("go", principal={"user": user.pk})
    client = AsyncClient()
    client.force_login(user)
    return run, client


async def _read(response) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]


@pytest.mark.parametrize("cursor", ["abc", "-5", "1.5", "1" * 5000, str(2 ** 63), "9" * 25])
@pytest.mark.parametrize("sent_as", ["header", "query"])
def test_a_cursor_that_is_not_an_event_id_is_a_400_not_a_replay_from_the_start(
        streamed, cursor, sent_as):
    """It was read as 0: the client got every event again, which the docs promise never
    happens ("loses and repeats nothing")."""
    run, client = streamed
    url = f"/turnkit/runs/{run.id}/events"
    if sent_as == "header":
        response = async_to_sync(client.get)(url, headers={"Last-Event-ID": cursor})
    else:
        response = async_to_sync(client.get)(url, {"after": cursor})
    assert response.status_code == 400
    assert b"after" in response.content or b"Last-Event-ID" in response.content


def test_a_valid_cursor_resumes_after_it(streamed):
    run, client = streamed
    ids = list(run.events().values_list("id", flat=True))
    response = async_to_sync(client.get)(f"/turnkit/runs/{run.id}/events",
                                         headers={"Last-Event-ID": f" {ids[0]} "})
    body = b"".join(async_to_sync(_read)(response)).decode()
    assert f"id: {ids[0]}\n" not in body and f"id: {ids[1]}\n" in body and "event: end" in body


@pytest.mark.parametrize("limit", [-1, "3", 2.5, True])
def test_run_events_refuses_a_limit_that_is_not_a_count(streamed, limit):
    """It raised what the queryset slice did (ValueError, TypeError), or nothing for True."""
    run, _client = streamed
    with pytest.raises(InputError, match="limit"):
        run.events(limit=limit)


def test_run_events_with_a_limit_beyond_any_count_returns_every_event(streamed):
    """A LIMIT past a bigint failed in the database (IntegrityError on SQLite, DataError on
    PostgreSQL)."""
    run, _client = streamed
    assert list(run.events(limit=10**30)) == list(run.events())
    assert len(run.events(limit=2)) == 2 and not run.events(limit=0)


def test_head_answers_the_streams_headers_without_streaming(streamed):
    """HEAD ran the stream itself (``View`` answers HEAD with ``get``): a poll of the event
    table for up to ``max_seconds`` whose body nobody reads (a TypeError in Django's test
    client)."""
    run, client = streamed
    response = async_to_sync(client.head)(f"/turnkit/runs/{run.id}/events")
    assert response.status_code == 200 and not response.streaming
    assert response["Content-Type"] == "text/event-stream" and response.content == b""
    assert async_to_sync(client.head)("/turnkit/runs/turn_missing/events").status_code == 404
    bad = async_to_sync(client.head)(f"/turnkit/runs/{run.id}/events", {"after": "x"})
    assert bad.status_code == 400
