"""The SSE view (issue 15): a background run's durable events to a real HTTP client, resumed
from ``Last-Event-ID`` after a disconnect with no gap and no duplicate.

uvicorn serves Django's ASGI handler in a thread of this process (tests/asgi_server.py); the
client is httpx. The run executes here with ``services.run_turn`` while the client streams.
"""

from __future__ import annotations

import json
import queue
import threading
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.asgi_server import serving
from tests.integration.test_controls import issue_refund, refund_then_report
from turnkit_django import Agent, services
from turnkit_django.models import Event
from turnkit_django.testing import FunctionClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


def session_cookie() -> dict[str, str]:
    user = get_user_model().objects.create_user("reader", password="x")
    client = Client()
    client.force_login(user)
    return {"sessionid": client.cookies["sessionid"].value}


def frames(response: httpx.Response) -> Any:
    """Parse an SSE stream into (id, event, data) frames."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "event" in fields or "data" in fields:
                yield fields.get("id"), fields.get("event", "message"), fields.get("data", "")
            fields = {}
        elif not line.startswith(":") and ":" in line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def read_until(base: str, cookies: dict[str, str], run_id: str, stop: str,
               out: queue.Queue[Any], headers: dict[str, str] | None = None) -> None:
    """Stream the run's events into ``out`` until an event of type ``stop`` (then disconnect)."""
    with httpx.Client(base_url=base, cookies=cookies, timeout=30) as client, client.stream(
            "GET", f"/turnkit/runs/{run_id}/events", headers=headers or {}) as response:
        out.put(("status", response.status_code, response.headers.get("content-type")))
        for event_id, type_, data in frames(response):
            out.put((event_id, type_, data))
            if type_ == stop:
                break
    out.put(None)


def drain(out: queue.Queue[Any]) -> list[Any]:
    got = []
    while (item := out.get(timeout=30)) is not None:
        got.append(item)
    return got


def test_the_stream_follows_a_background_run_and_resumes_from_last_event_id(registered):
    agent = registered(Agent("streamed", tools=[issue_refund],
                             client=FunctionClient(refund_then_report("issue_refund"))))
    cookies = session_cookie()
    run = agent.submit("refund order 42")
    with serving() as base:
        first: queue.Queue[Any] = queue.Queue()
        reader = threading.Thread(target=read_until,
                                  args=(base, cookies, run.id, "approval.requested", first))
        reader.start()
        assert first.get(timeout=30) == ("status", 200, "text/event-stream")
        assert services.run_turn(run.id)  # the worker runs while the client listens
        got = drain(first)
        reader.join()
        assert got[-1][1] == "approval.requested"
        call_id = json.loads(got[-1][2])["payload"]["call_id"]

        run.approve(call_id)
        assert services.run_turn(run.id)  # the rest of the run, while nobody listens

        second: queue.Queue[Any] = queue.Queue()
        read_until(base, cookies, run.id, "end", second,
                   headers={"Last-Event-ID": got[-1][0]})
        rest = drain(second)
    assert rest[0][0] == "status"
    received = [int(i) for i, _, _ in got + rest[1:] if i is not None]
    stored = list(Event.objects.filter(root_turn_id=run.id).values_list("id", flat=True))
    assert received == stored  # no gap, no duplicate, in order
    assert rest[-1][1] == "end"
    types = [t for _, t, _ in rest]
    assert "approval.approved" in types and "turn.completed" in types


def test_the_stream_and_page_refuse_anonymous_users_and_unknown_runs(registered):
    agent = registered(Agent("private", client=FunctionClient(lambda r: None)))
    run = agent.prepare("x")
    with serving() as base, httpx.Client(base_url=base, timeout=10) as client:
        assert client.get(f"/turnkit/runs/{run.id}/events").status_code == 404
        assert client.get(f"/turnkit/runs/{run.id}/").status_code == 404
        cookies = session_cookie()
        client.cookies.update(cookies)
        assert client.get("/turnkit/runs/turn_missing/events").status_code == 404
        page = client.get(f"/turnkit/runs/{run.id}/")
        assert page.status_code == 200 and f"/turnkit/runs/{run.id}/events" in page.text
