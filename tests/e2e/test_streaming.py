"""Done-when 2 of issue 38: a background turn streams from a real Celery worker to its readers.

A fake OpenAI-compatible provider on loopback (an HTTP server in the test process) answers a
``"stream": true`` request with twelve server-sent text chunks ~60 ms apart. The worker publishes
each chunk on the delta channel (Redis pub/sub over the broker); the test process reads
``run.stream()`` and the SSE view (uvicorn in a thread here, read through httpx), and both see
the step's deltas, stamped with the claim's fence, before its assistant ``message.created``.

Then a worker is SIGKILLed while its stream is open (the provider stalls after a few chunks of
the first request): the reconcile loop recovers the turn after its lease runs out, the other
worker streams the step again under a higher fence, and a reader that follows the fence (the
rule of docs/howto/streaming.md) ends with exactly the committed text, once.
"""

from __future__ import annotations

import json
import queue
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler
from typing import Any

import httpx
import pytest
from django.contrib.auth import get_user_model
from django.test import Client

from tests.asgi_server import serving
from tests.e2e.harness import Cluster, wait_for, wait_terminal
from tests.e2e.loopback import LoopbackProvider
from turnkit_django import Delta
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Message

pytestmark = pytest.mark.django_db(transaction=True)

CHUNKS = [f"word{i} " for i in range(12)]
TEXT = "".join(CHUNKS)
GAP = 0.06  # seconds between chunks: the model writing, not synchronisation
STALL_AFTER = 4  # chunks the first request sends before it stalls (stall=True)


class StreamingProvider(LoopbackProvider):
    """Chat completions on loopback, streamed as server-sent chunks when asked to.

    Every request first waits for ``go`` (set once the readers are subscribed). With ``stall``,
    the first request stops after :data:`STALL_AFTER` chunks until ``release`` is set (its
    worker is killed meanwhile); the others send the whole answer.
    """

    def __init__(self, *, stall: bool = False) -> None:
        self.stall = stall
        self.go = threading.Event()
        self.release = threading.Event()
        self.stalled = threading.Event()
        self.lock = threading.Lock()
        self.requests: list[dict[str, Any]] = []
        super().__init__()

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        with self.lock:
            self.requests.append(body)
            first = len(self.requests) == 1
        assert body.get("stream") is True, "a background turn with a Redis channel streams"
        assert self.go.wait(timeout=30), "the readers never subscribed"
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.end_headers()

        def send(chunk: dict[str, Any] | str) -> None:
            data = chunk if isinstance(chunk, str) else json.dumps(chunk)
            handler.wfile.write(f"data: {data}\n\n".encode())
            handler.wfile.flush()

        def choice(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {"id": "chatcmpl-e2e", "object": "chat.completion.chunk",
                    "model": body["model"],
                    "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        for number, text in enumerate(CHUNKS):
            if number == STALL_AFTER and first and self.stall:
                self.stalled.set()
                self.release.wait(timeout=60)
                return
            send(choice({"role": "assistant", "content": text} if number == 0
                        else {"content": text}))
            time.sleep(GAP)  # the model's pace, not synchronisation
        send(choice({}, "stop"))
        send({"id": "chatcmpl-e2e", "object": "chat.completion.chunk", "model": body["model"],
              "choices": [], "usage": {"prompt_tokens": 3, "completion_tokens": 12,
                                       "total_tokens": 15}})
        send("[DONE]")

    def close(self) -> None:
        self.go.set()
        self.release.set()
        self.server.shutdown()
        self.server.server_close()


def start_provider(stall: bool = False) -> Iterator[StreamingProvider]:
    fake = StreamingProvider(stall=stall)
    try:
        yield fake
    finally:
        fake.close()


@pytest.fixture
def provider() -> Iterator[StreamingProvider]:
    yield from start_provider()


@pytest.fixture
def stalling_provider() -> Iterator[StreamingProvider]:
    yield from start_provider(stall=True)


class FenceReader:
    """What a page following the run shows, by the documented rule: per turn, the partial text
    of the newest fence only (a newer fence restarts it, an older one is dropped), replaced by
    the assistant ``message.created`` when it arrives."""

    def __init__(self) -> None:
        self.fences: dict[str, int] = {}
        self.partial: dict[str, str] = {}
        self.shown: list[tuple[str, str]] = []  # committed lines: (turn id, text)

    def delta(self, turn_id: str, fence: int, kind: str, text: str) -> None:
        if kind != "text":
            return
        latest = self.fences.get(turn_id)
        if latest is not None and fence < latest:
            return  # an older claim of a recovered turn
        if latest is not None and fence > latest:
            self.partial.pop(turn_id, None)  # the step streams again: restart its text
        self.fences[turn_id] = fence
        self.partial[turn_id] = self.partial.get(turn_id, "") + text

    def message(self, turn_id: str, role: str, text: str) -> None:
        if role == "assistant":
            self.partial.pop(turn_id, None)
            self.shown.append((turn_id, text))

    def screen(self, turn_id: str) -> str:
        """Everything shown for the turn's answers: committed lines, then partial text."""
        lines = [text for tid, text in self.shown if tid == turn_id]
        return "".join(lines) + self.partial.get(turn_id, "")


def as_item(item: Any) -> tuple[str, Any]:
    """("delta", Delta) or ("event", (type, turn_id, payload)) of a ``run.stream()`` item."""
    if isinstance(item, Delta):
        return "delta", item
    return "event", (item.type, item.turn_id, item.payload or {})


def read_run(run: Any, out: queue.Queue[Any]) -> None:
    """A thread: ``run.stream()`` into ``out`` (``None`` at its end, an exception if raised)."""
    from django.db import connection

    try:
        for item in run.stream(timeout=60):
            out.put(as_item(item))
    except BaseException as exc:  # handed to the test
        out.put(("error", exc))
    finally:
        out.put(None)
        connection.close()


def sse_frames(response: httpx.Response) -> Iterator[tuple[str, str]]:
    """(event, data) of each frame of an SSE response."""
    fields: dict[str, str] = {}
    for line in response.iter_lines():
        if line == "":
            if "event" in fields:
                yield fields["event"], fields.get("data", "")
            fields = {}
        elif not line.startswith(":") and ":" in line:
            name, _, value = line.partition(":")
            fields[name] = value.removeprefix(" ")


def read_sse(base: str, cookies: dict[str, str], run_id: str, out: queue.Queue[Any]) -> None:
    """A thread: the SSE view's frames into ``out`` until ``end``."""
    try:
        with httpx.Client(base_url=base, cookies=cookies, timeout=60) as client, client.stream(
                "GET", f"/turnkit/runs/{run_id}/events") as response:
            assert response.status_code == 200, response.status_code
            for type_, data in sse_frames(response):
                payload = json.loads(data) if data else {}
                if type_ == "message.delta":
                    out.put(("delta", Delta(payload["turn_id"], payload["fence"],
                                            payload["index"], payload["kind"], payload["text"])))
                else:
                    out.put(("event", (type_, payload.get("turn_id"),
                                       payload.get("payload") or {})))
                if type_ == "end":
                    break
    except BaseException as exc:
        out.put(("error", exc))
    finally:
        out.put(None)


def drain(out: queue.Queue[Any]) -> list[tuple[str, Any]]:
    got = []
    while (item := out.get(timeout=60)) is not None:
        assert item[0] != "error", item[1]
        got.append(item)
    return got


def first_item(out: queue.Queue[Any]) -> tuple[str, Any]:
    """The first item a reader got (it is subscribed by then); kept for :func:`drain`."""
    item = out.get(timeout=30)
    assert item is not None and item[0] != "error", item
    return item


def reader_session() -> tuple[dict[str, int], dict[str, str]]:
    """A user's principal and the session cookie of that user (the SSE view's reader)."""
    user = get_user_model().objects.create_user("stream-reader", password="x")
    client = Client()
    client.force_login(user)
    return {"user": user.pk}, {"sessionid": client.cookies["sessionid"].value}


def assistant_text_created(items: list[tuple[str, Any]], turn_id: str) -> int:
    """The position of the turn's assistant ``message.created``."""
    return next(i for i, (what, value) in enumerate(items)
                if what == "event" and value[0] == "message.created"
                and value[1] == turn_id and value[2].get("role") == "assistant")


def committing_fence(turn_id: str) -> int:
    """The fence of the claim that committed the turn's answer (the turn's own fence moves on
    when a claim ends)."""
    fence = Message.objects.get(turn_id=turn_id, role="assistant").fence
    assert fence is not None
    return fence


def follow(items: list[tuple[str, Any]]) -> FenceReader:
    reader = FenceReader()
    for what, value in items:
        if what == "delta":
            reader.delta(value.turn_id, value.fence, value.kind, value.text)
        elif value[0] == "message.created":
            reader.message(value[1], value[2].get("role", ""), value[2].get("text", ""))
    return reader


@pytest.mark.timeout(120)
def test_a_worker_streams_deltas_to_run_stream_and_the_sse_view_before_the_message(
        cluster: Cluster, provider: StreamingProvider) -> None:
    cluster.start(1, env={"OPENAI_BASE_URL": provider.url})
    principal, cookies = reader_session()
    run = get_agent("e2e_provider").submit("stream me", principal=principal)
    with serving() as base:
        streamed: queue.Queue[Any] = queue.Queue()
        viewed: queue.Queue[Any] = queue.Queue()
        threads = [threading.Thread(target=read_run, args=(run, streamed)),
                   threading.Thread(target=read_sse, args=(base, cookies, run.id, viewed))]
        for thread in threads:
            thread.start()
        firsts = [first_item(streamed), first_item(viewed)]  # both subscribed
        provider.go.set()
        got = [[firsts[0], *drain(streamed)], [firsts[1], *drain(viewed)]]
        for thread in threads:
            thread.join(timeout=30)

    row = wait_terminal([run.id], timeout=30)[run.id]
    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.output_text == TEXT
    assert len(provider.requests) == 1
    for items in got:
        created = assistant_text_created(items, run.id)
        deltas = [v for what, v in items if what == "delta"]
        assert deltas, "no delta reached the reader"
        before = [v for what, v in items[:created] if what == "delta"]
        assert before == deltas, "every delta comes before the step's message.created"
        assert {d.fence for d in deltas} == {committing_fence(run.id)}, "the claim's fence"
        assert {d.turn_id for d in deltas} == {run.id}
        assert [d.index for d in deltas] == list(range(len(CHUNKS)))
        assert "".join(d.text for d in deltas) == TEXT == items[created][1][2]["text"]
        assert follow(items).screen(run.id) == TEXT


@pytest.mark.timeout(120)
def test_a_turn_recovered_after_a_sigkill_mid_stream_streams_again_under_a_new_fence(
        cluster: Cluster, stalling_provider: StreamingProvider) -> None:
    provider = stalling_provider
    cluster.start(2, env={"OPENAI_BASE_URL": provider.url})
    cluster.start_reconciler()
    run = get_agent("e2e_provider").submit("stream me again")
    streamed: queue.Queue[Any] = queue.Queue()
    thread = threading.Thread(target=read_run, args=(run, streamed))
    thread.start()
    got = [first_item(streamed)]  # subscribed
    provider.go.set()

    # The first claim has streamed a few chunks and stalls with its stream open.
    assert provider.stalled.wait(timeout=30), "the first request never stalled"
    while len([1 for what, _ in got if what == "delta"]) < STALL_AFTER:
        item = streamed.get(timeout=30)
        assert item is not None and item[0] != "error", item
        got.append(item)
    victim = cluster.worker(wait_for(lambda: cluster.run_turn_deliveries(run.id), timeout=10,
                                     what="the turn's delivery")[0]["worker"])
    victim.kill()  # SIGKILL, with its stream open

    got += drain(streamed)
    thread.join(timeout=30)
    row = wait_terminal([run.id], timeout=30)[run.id]
    assert row.status == TurnStatus.COMPLETED, row.error
    assert row.recovery_attempts == 1
    assert row.output_text == TEXT
    assert len(provider.requests) == 2

    fence = committing_fence(run.id)
    deltas = [v for what, v in got if what == "delta"]
    killed = [d for d in deltas if d.fence < fence]
    recovered = [d for d in deltas if d.fence == fence]
    assert killed and recovered and len(killed) + len(recovered) == len(deltas)
    assert "".join(d.text for d in killed) == "".join(CHUNKS[:STALL_AFTER])
    assert "".join(d.text for d in recovered) == TEXT, "the recovered claim streams it all"
    assert deltas == killed + recovered, "the killed claim's deltas, then the new fence's"
    created = assistant_text_created(got, run.id)
    assert [v for what, v in got[:created] if what == "delta"] == deltas
    assert got[created][1][2]["text"] == TEXT

    reader = follow(got)
    assert reader.screen(run.id) == TEXT, "exactly the committed text, once"
    # Midway (before the commit), the reader shows only the new fence's partial text.
    midway = follow(got[:created])
    assert midway.screen(run.id) == TEXT and midway.fences[run.id] == fence
