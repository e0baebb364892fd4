"""The SSE view's cost while it waits (issue 35, H8): an open stream holds no database session
between its polls, served by a real ASGI server (uvicorn, tests/asgi_server.py)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import connection

from tests.asgi_server import serving, serving_wsgi
from tests.integration.test_event_stream import principal, session_cookie
from turnkit_django import Agent
from turnkit_django.console.views import EventStream
from turnkit_django.testing import FunctionClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


def sessions() -> int:
    """The other sessions connected to the test database now."""
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM pg_stat_activity "
                       "WHERE datname = current_database() AND pid <> pg_backend_pid()")
        count: int = cursor.fetchone()[0]
        return count


def settled(expected: int) -> int:
    """The sessions once PostgreSQL has seen the closed ones out (a backend leaves
    pg_stat_activity a moment after its client closed it), waiting at most 5 s for ``expected``."""
    deadline = time.monotonic() + 5
    while (count := sessions()) > expected and time.monotonic() < deadline:
        time.sleep(0.05)
    return count


def waiting(lines: Iterator[str]) -> Iterator[str]:
    """Read the stream until its first ``: waiting`` comment (a poll found nothing, it sleeps);
    the lines, to be kept open (closing the iterator closes the response)."""
    for line in lines:
        if line == ": waiting":
            return lines
    raise AssertionError("the stream ended before it waited")


@pytest.mark.parametrize("server", [serving, serving_wsgi], ids=["asgi", "wsgi"])
def test_waiting_streams_hold_no_database_session(registered, monkeypatch, server):
    """Each held its session (and, under WSGI, sent nothing: Django consumed the async stream
    whole before sending a byte)."""
    if connection.vendor != "postgresql":
        pytest.skip("counts PostgreSQL sessions")
    monkeypatch.setattr(EventStream, "poll_interval", 60.0)  # asleep while the test counts
    agent = registered(Agent("idle", client=FunctionClient(lambda r: None)))
    cookies = session_cookie()
    run = agent.prepare("x", principal=principal())  # pending: its streams wait
    with server() as base, ExitStack() as streams:
        before = sessions()
        opened = []
        for _ in range(6):
            client = streams.enter_context(httpx.Client(base_url=base, cookies=cookies,
                                                        timeout=10))
            response = streams.enter_context(
                client.stream("GET", f"/turnkit/runs/{run.id}/events"))
            assert response.status_code == 200
            opened.append(waiting(response.iter_lines()))
        assert settled(before) <= before  # not one per open stream


def _logout(cookies: dict[str, str], _reader: str) -> None:
    Session.objects.filter(session_key=cookies["sessionid"]).delete()  # what logout() does


def _revoke(_cookies: dict[str, str], reader: str) -> None:
    get_user_model().objects.get(username=reader).user_permissions.clear()


@pytest.mark.parametrize("revoke", [_logout, _revoke], ids=["logout", "permission"])
def test_a_stream_ends_once_its_reader_may_no_longer_read_the_run(registered, monkeypatch,
                                                                  revoke):
    """It stayed open, sending every new event, for up to max_seconds (300)."""
    monkeypatch.setattr(EventStream, "poll_interval", 0.05)
    monkeypatch.setattr(EventStream, "authorization_interval", 0.0)  # at every poll
    agent = registered(Agent("watched", client=FunctionClient(lambda r: None)))
    session_cookie("owner")
    cookies = session_cookie("auditor", permissions=("view_transcript",))
    run = agent.prepare("x", principal=principal("owner"))
    with serving() as base, httpx.Client(base_url=base, cookies=cookies, timeout=10) as client, \
            client.stream("GET", f"/turnkit/runs/{run.id}/events") as response:
        lines = waiting(response.iter_lines())
        revoke(cookies, "auditor")
        # The poll running now may have checked before; the next one ends the stream.
        after = [line for line, _ in zip(lines, range(50), strict=False)]
    assert after.count(": waiting") <= 1 and "event: end" not in after
