"""The SSE view streams a background turn's deltas (issue 38): it subscribes to the run's delta
channel before its first poll and, between the durable polls, sends each delta as an
``event: message.delta`` frame with no ``id:`` (a reconnect resumes from the durable cursor), its
data the JSON ``{turn_id, fence, index, kind, text}``. Only deltas of turns in conversations the
reader may read are sent, and a delta of an older fence than the latest seen for its turn is not.

SQLite's shared in-memory database must never be written and read at once: the worker thread
runs the turn while the view waits on the channel, and the view's next poll first joins the
worker (tests/unit/test_streaming_background.py does the same for ``run.stream()``).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from asgiref.sync import async_to_sync
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client

from tests.unit.test_event_stream_poll_cost import fan_out
from turnkit_django import Agent, Delta, services
from turnkit_django.console.views import WAITING, Cursor, EventStream
from turnkit_django.models import Turn
from turnkit_django.runtime import streaming as runtime_streaming
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


def parse(body: str) -> list[dict[str, Any]]:
    """The stream's frames as dicts of their fields (comments and the retry frame left out)."""
    found = []
    for block in body.split("\n\n"):
        fields = dict(line.split(": ", 1) for line in block.split("\n")
                      if line and not line.startswith(":") and ": " in line)
        if "event" in fields:
            found.append(fields)
    return found


async def _read(response) -> list[bytes]:
    return [chunk async for chunk in response.streaming_content]


def read_stream(user, run_id: str, *, asgi: bool = True) -> list[dict[str, Any]]:
    if asgi:
        client = AsyncClient()
        client.force_login(user)
        response = async_to_sync(client.get)(f"/turnkit/runs/{run_id}/events")
        return parse(b"".join(async_to_sync(_read)(response)).decode())
    sync_client = Client()
    sync_client.force_login(user)
    response = sync_client.get(f"/turnkit/runs/{run_id}/events")
    return parse(b"".join(response.streaming_content).decode())


@pytest.fixture
def when_idle(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[Any]]:
    """Append a callable: the view's first idle poll (nothing new: the view then waits) runs it
    in a thread after reading, and the later polls join that thread first."""
    pending: list[Any] = []
    threads: list[threading.Thread] = []
    real_poll = EventStream.poll

    def poll(self: EventStream, cursor: Cursor) -> tuple[list[str], bool]:
        for thread in threads:
            thread.join(timeout=30)
        found = real_poll(self, cursor)
        if pending and found[0][-1] == WAITING:
            thread = threading.Thread(target=pending.pop())
            threads.append(thread)
            thread.start()
        return found

    monkeypatch.setattr(EventStream, "poll", poll)
    monkeypatch.setattr(EventStream, "poll_interval", 1.0)  # the worker streams in between
    monkeypatch.setattr(EventStream, "max_seconds", 20.0)
    yield pending
    for thread in threads:
        thread.join(timeout=30)


def kinds(frames: list[dict[str, Any]]) -> list[str]:
    out = []
    for f in frames:
        role = json.loads(f["data"]).get("payload", {}).get("role", "")
        out.append(f"{f['event']}:{role}" if f["event"] == "message.created" else f["event"])
    return out


@pytest.mark.parametrize("asgi", [True, False], ids=["asgi", "wsgi"])
def test_the_deltas_of_a_background_step_arrive_before_its_message_and_carry_no_id(
        registered, when_idle, asgi):
    user = get_user_model().objects.create_user("reader", password="x")
    agent = registered(Agent("sse-streaming", client=FunctionClient(
        lambda request: reply("hello streaming world", chunks=4, delay=0.02))))
    run = agent.submit("Say hello", principal={"user": user.pk})
    when_idle.append(lambda: services.run_turn(run.id))

    frames = read_stream(user, run.id, asgi=asgi)

    assert kinds(frames) == ["message.created:user", *["message.delta"] * 4,
                             "message.created:assistant", "turn.completed", "end"]
    deltas = [f for f in frames if f["event"] == "message.delta"]
    assert all("id" not in f for f in deltas)
    assert all("id" in f for f in frames if f["event"] not in ("message.delta", "end"))
    data = [json.loads(f["data"]) for f in deltas]
    run.row.refresh_from_db()
    assert [sorted(d) for d in data] == [["fence", "index", "kind", "text", "turn_id"]] * 4
    assert "".join(d["text"] for d in data) == "hello streaming world" == run.output_text
    assert [d["index"] for d in data] == [0, 1, 2, 3]
    assert {(d["turn_id"], d["fence"], d["kind"]) for d in data} == {
        (run.id, run.row.fence - 1, "text")}


def test_only_deltas_of_readable_conversations_and_of_the_latest_fence_are_sent(
        registered, when_idle, monkeypatch):
    """The continuations of the run's tree act in helpdesk conversations the reader may not
    read: their deltas are not sent; nor is the root's delta of an older fence."""
    user, run = fan_out(registered, 1)
    (desk_turn,) = Turn.objects.filter(root_turn_id=run.id).active()
    channel = runtime_streaming.delta_channel()

    def publish() -> None:
        for delta in [Delta(run.id, 3, 0, "text", "mine "), Delta(desk_turn.pk, 1, 0, "text",
                                                                      "SECRET"),
                      Delta(run.id, 2, 9, "text", "stale"), Delta(run.id, 3, 1, "text", "too")]:
            channel.publish(run.id, delta)

    when_idle.append(publish)
    monkeypatch.setattr(EventStream, "max_seconds", 2.5)  # the desk's turn stays pending
    frames = read_stream(user, run.id)
    texts = [json.loads(f["data"])["text"] for f in frames if f["event"] == "message.delta"]
    assert texts == ["mine ", "too"]
