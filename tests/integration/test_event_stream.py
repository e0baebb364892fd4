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
from django.contrib.auth.models import Permission
from django.test import Client

from tests.asgi_server import serving
from tests.dispatch import override_turnkit
from tests.integration.test_controls import issue_refund, refund_then_report
from turnkit_django import Agent, services
from turnkit_django.models import Event
from turnkit_django.testing import FunctionClient

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


def session_cookie(name: str = "reader", *, permissions: tuple[str, ...] = ()) -> dict[str, str]:
    """A logged-in session of a new user ``name`` (its principal: ``{"user": its pk}``)."""
    user = get_user_model().objects.create_user(name, password="x")
    user.user_permissions.add(*(Permission.objects.get(codename=p) for p in permissions))
    client = Client()
    client.force_login(user)
    return {"sessionid": client.cookies["sessionid"].value}


def principal(name: str = "reader") -> dict[str, int]:
    return {"user": get_user_model().objects.get(username=name).pk}


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
    run = agent.submit("refund order 42", principal=principal())
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
    cookies = session_cookie()
    run = agent.prepare("x", principal=principal())
    with serving() as base, httpx.Client(base_url=base, timeout=10) as client:
        assert client.get(f"/turnkit/runs/{run.id}/events").status_code == 404
        assert client.get(f"/turnkit/runs/{run.id}/").status_code == 404
        client.cookies.update(cookies)
        assert client.get("/turnkit/runs/turn_missing/events").status_code == 404
        page = client.get(f"/turnkit/runs/{run.id}/")
        assert page.status_code == 200 and f"/turnkit/runs/{run.id}/events" in page.text


def test_without_a_policy_a_run_is_shown_to_its_own_user_and_to_transcript_readers(registered):
    """No AUTHORIZATION_POLICY allows every action, but the views do not show one user's run
    to every other logged-in user: only to its principal and to holders of view_transcript."""
    agent = registered(Agent("mine", client=FunctionClient(lambda r: None)))
    owner = session_cookie("owner")
    other = session_cookie("other")
    staff = session_cookie("auditor", permissions=("view_transcript",))
    mine = agent.prepare("x", principal=principal("owner"))
    unowned = agent.prepare("y")  # started by the application itself, for nobody
    with serving() as base:
        def status(cookies: dict[str, str], run_id: str, path: str = "") -> int:
            with httpx.Client(base_url=base, cookies=cookies, timeout=10) as client:
                return client.get(f"/turnkit/runs/{run_id}/{path}").status_code

        assert status(owner, mine.id) == 200
        assert status(other, mine.id) == 404 and status(other, mine.id, "events") == 404
        assert status(staff, mine.id) == 200
        assert status(owner, unowned.id) == 404 and status(other, unowned.id) == 404
        assert status(staff, unowned.id) == 200


def test_with_a_policy_the_policy_decides_what_the_views_show(registered):
    agent = registered(Agent("policed", client=FunctionClient(lambda r: None)))
    owner = session_cookie("owner")
    other = session_cookie("other")
    mine = agent.prepare("x", principal=principal("owner"))
    asked: list[Any] = []

    def everyone_but_the_owner(action: str, *, principal: Any, **resources: Any) -> bool:
        asked.append((action, principal, resources["turn_principal"]))
        return principal != resources["turn_principal"]

    with override_turnkit(AUTHORIZATION_POLICY=everyone_but_the_owner), serving() as base:
        for cookies, expected in ((owner, 404), (other, 200)):
            with httpx.Client(base_url=base, cookies=cookies, timeout=10) as client:
                assert client.get(f"/turnkit/runs/{mine.id}/").status_code == expected
    assert [a for a, _, _ in asked] == ["read_messages", "read_messages"]
