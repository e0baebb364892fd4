"""Done-when 2 of issue 37, scaled for CI: provider limits shared by two worker processes.

A fake OpenAI-compatible provider on loopback (an HTTP server in the test process) counts the
requests in flight and answers 429 with ``Retry-After: 1`` to the first ones. With
``PROVIDER_LIMITS`` concurrency 5 counted in Redis and two threads-pool workers running 30
turns: the provider never sees more than 5 requests at once, every turn completes without a
recovery, a turn's request after a 429 arrives no sooner than the Retry-After (server-side
clock), and the test process sees the turns backing off (store.provider_waits).
"""

from __future__ import annotations

import itertools
import json
import threading
import time
from http.server import BaseHTTPRequestHandler
from typing import Any

import pytest

from tests.e2e.harness import Cluster, wait_for, wait_terminal
from tests.e2e.loopback import LoopbackProvider
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Turn
from turnkit_django.store import provider_waits

pytestmark = pytest.mark.django_db(transaction=True)

TURNS = 30
CONCURRENCY = 5
REFUSED = 8  # the first requests answered 429
RETRY_AFTER = 1.0
LATENCY = 0.15  # seconds a granted request takes (so requests overlap)


class FakeProvider(LoopbackProvider):
    """Chat completions on loopback: counts requests in flight, refuses the first ones."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.inside = self.peak = self.served = 0
        self.arrivals: dict[str, list[tuple[float, int]]] = {}  # input -> (arrival, status)
        super().__init__()

    def answer(self, handler: BaseHTTPRequestHandler, body: dict[str, Any]) -> None:
        arrived = time.monotonic()
        text = next(m["content"] for m in body["messages"] if m["role"] == "user")
        with self.lock:
            self.inside += 1
            self.peak = max(self.peak, self.inside)
            self.served += 1
            refuse = self.served <= REFUSED
            self.arrivals.setdefault(str(text), []).append((arrived, 429 if refuse else 200))
        try:
            if refuse:
                self._send(handler, 429, {"error": {"type": "rate_limit_error",
                                                    "message": "slow down"}},
                           {"Retry-After": str(int(RETRY_AFTER))})
                return
            time.sleep(LATENCY)  # the model's latency, not synchronisation
            self._send(handler, 200, {
                "id": "chatcmpl-e2e", "object": "chat.completion", "model": body["model"],
                "choices": [{"index": 0, "finish_reason": "stop",
                             "message": {"role": "assistant", "content": f"answer to {text}"}}],
                "usage": {"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}})
        finally:
            with self.lock:
                self.inside -= 1

    @staticmethod
    def _send(handler: BaseHTTPRequestHandler, status: int, document: dict[str, Any],
              headers: dict[str, str] | None = None) -> None:
        data = json.dumps(document).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        for name, value in (headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        handler.wfile.write(data)

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def provider() -> Any:
    fake = FakeProvider()
    try:
        yield fake
    finally:
        fake.close()


@pytest.mark.timeout(240)
def test_two_workers_share_the_provider_limit_and_wait_out_429s(
        cluster: Cluster, provider: FakeProvider) -> None:
    limits = {"openai": {"concurrency": CONCURRENCY}}
    cluster.start(2, pool="threads", concurrency=TURNS, env={
        "OPENAI_BASE_URL": provider.url,
        "TURNKIT_E2E_PROVIDER_LIMITS": json.dumps(limits)})
    agent = get_agent("e2e_provider")
    ids = {agent.submit(f"turn-{i}").id: f"turn-{i}" for i in range(TURNS)}

    # The turns waiting for a slot or backing off after a 429 are seen from this process.
    seen: list[dict[str, int]] = []

    def waiting_or_done() -> bool:
        seen.append(provider_waits.waiting_counts())
        return bool(seen[-1]) or not Turn.objects.filter(pk__in=ids).active().exists()

    wait_for(waiting_or_done, timeout=60, what="a turn seen waiting for a provider slot")
    statuses = list(Turn.objects.filter(pk__in=ids).values_list("status", flat=True))
    assert seen[-1].get("openai", 0) >= 1, (
        seen[-1], provider.served, provider.peak, statuses)

    rows = wait_terminal(ids, timeout=180)
    assert {row.status for row in rows.values()} == {TurnStatus.COMPLETED}
    assert all(row.recovery_attempts == 0 for row in rows.values())
    assert all(row.output_text == f"answer to {ids[pk]}" for pk, row in rows.items())
    assert provider.peak <= CONCURRENCY
    assert provider.peak == CONCURRENCY  # the limit, not the workers, held them back

    refused_turns = 0
    for arrivals in provider.arrivals.values():
        for (at, status), (again, _) in itertools.pairwise(arrivals):
            if status == 429:
                refused_turns += 1
                assert again - at >= RETRY_AFTER
    assert refused_turns == REFUSED
    assert provider_waits.waiting_counts() == {}
