"""Provider limits (TURNKIT['PROVIDER_LIMITS']) and a provider's refusal for now (429).

The limiter is the in-process one here (no Redis URL and no Redis broker); tests/integration and
tests/e2e run turns in threads and processes against it and against Redis.
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from django.core.checks import run_checks

from turnkit_django import Agent
from turnkit_django.base.throttles import LocalLimiter, Quota
from turnkit_django.clients import ModelRequest
from turnkit_django.events import Event
from turnkit_django.events import event as signal
from turnkit_django.exceptions import ModelError, ModelRateLimited
from turnkit_django.runtime import throttling
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db


def e022(settings: Any, value: object) -> list[str]:
    settings.TURNKIT = {"PROVIDER_LIMITS": value}
    return [m.msg for m in run_checks(tags=["turnkit"]) if m.id == "turnkit.E024"]


@pytest.mark.parametrize("value", [
    [], {"anthropic": 5}, {"anthropic": {}}, {"anthropic": {"concurency": 5}},
    {"anthropic": {"concurrency": 0}}, {"anthropic": {"concurrency": True}},
    {"anthropic": {"requests_per_minute": 1.5}}, {"": {"concurrency": 1}},
    {"a:b:c": {"concurrency": 1}}, {3: {"concurrency": 1}},
])
def test_bad_provider_limits_are_refused_by_a_system_check(settings: Any, value: object) -> None:
    assert len(e022(settings, value)) == 1


def test_good_provider_limits_pass_the_check(settings: Any) -> None:
    assert e022(settings, {"anthropic": {"concurrency": 200, "requests_per_minute": 4000,
                                         "input_tokens_per_minute": 2_000_000},
                           "openai:gpt-5.4-mini": {"concurrency": 3}}) == []


def test_an_unknown_limit_is_named_in_the_error(settings: Any) -> None:
    [message] = e022(settings, {"anthropic": {"concurency": 5}})
    assert "'concurency'" in message


def test_a_limits_redis_url_that_is_not_redis_is_refused(settings: Any) -> None:
    settings.TURNKIT = {"LIMITS_REDIS_URL": "amqp://localhost"}
    assert [m.id for m in run_checks(tags=["turnkit"]) if m.id == "turnkit.E024"] == [
        "turnkit.E024"]


def test_requests_per_minute_wait_for_the_next_minute() -> None:
    now = [120.0]
    limits = LocalLimiter(clock=lambda: now[0])
    quota = Quota(requests_per_minute=2)
    assert limits.try_acquire("p", quota, 0, "a", 60).granted
    assert limits.try_acquire("p", quota, 0, "b", 60).granted
    refused = limits.try_acquire("p", quota, 0, "c", 60)
    assert not refused.granted and refused.wait == 60.0
    now[0] = 150.0
    assert limits.try_acquire("p", quota, 0, "c", 60).wait == 30.0
    now[0] = 180.0
    assert limits.try_acquire("p", quota, 0, "c", 60).granted


def test_input_tokens_per_minute_count_the_estimate_and_let_a_large_request_go_alone() -> None:
    now = [0.0]
    limits = LocalLimiter(clock=lambda: now[0])
    quota = Quota(input_tokens_per_minute=100)
    assert limits.try_acquire("p", quota, 500, "a", 60).granted  # alone in its minute
    assert not limits.try_acquire("p", quota, 1, "b", 60).granted
    now[0] = 60.0
    assert limits.try_acquire("p", quota, 60, "b", 60).granted
    assert not limits.try_acquire("p", quota, 41, "c", 60).granted
    assert limits.try_acquire("p", quota, 40, "c", 60).granted


def test_a_slot_of_a_dead_worker_frees_itself_after_its_time_to_live() -> None:
    now = [0.0]
    limits = LocalLimiter(clock=lambda: now[0])
    quota = Quota(concurrency=1)
    assert limits.try_acquire("p", quota, 0, "dead", 30).granted  # never released
    assert limits.try_acquire("p", quota, 0, "next", 30).wait is None
    now[0] = 31.0
    assert limits.try_acquire("p", quota, 0, "next", 30).granted


def test_concurrent_model_calls_never_exceed_the_concurrency_limit(settings: Any) -> None:
    """Six threads call the model through the limiter; at most two are inside at once."""
    settings.TURNKIT = {"PROVIDER_LIMITS": {"function": {"concurrency": 2}}}
    inside, peak, lock, go = [0], [0], threading.Lock(), threading.Event()

    def respond(request: ModelRequest) -> Any:
        with lock:
            inside[0] += 1
            peak[0] = max(peak[0], inside[0])
        go.wait(5)
        with lock:
            inside[0] -= 1
        return reply("ok")

    client = FunctionClient(respond)
    key, quota = throttling.quota_for("function", "m") or ("", Quota())
    limits = throttling.limiter()
    request = ModelRequest(model="m", messages=())

    def one() -> None:
        slot = f"s{threading.get_ident()}"
        while not limits.try_acquire(key, quota, 0, slot, 60).granted:
            time.sleep(0.005)
        try:
            client.complete(request)
        finally:
            limits.release(key, slot)

    threads = [threading.Thread(target=one) for _ in range(6)]
    for thread in threads:
        thread.start()
    while len(client.requests) < 2:
        time.sleep(0.005)
    go.set()
    for thread in threads:
        thread.join(10)
    assert len(client.requests) == 6 and peak[0] == 2


def refusing(times: int, retry_after: float | None = 0.05) -> FunctionClient:
    count = [0]

    def respond(request: ModelRequest) -> Any:
        count[0] += 1
        if count[0] <= times:
            raise ModelRateLimited("HTTP 429 rate_limit_error", retry_after=retry_after)
        return reply("done")

    return FunctionClient(respond)


def test_a_rate_limited_answer_is_waited_out_and_the_same_request_sent_again(
        django_capture_on_commit_callbacks: Any) -> None:
    client = refusing(2)
    events: list[Event] = []

    def receiver(sender: Any, event: Event, **kwargs: Any) -> None:
        events.append(event)

    signal.connect(receiver)
    try:
        with django_capture_on_commit_callbacks(execute=True):
            run = Agent("patient", instructions="x", client=client).run("hi")
    finally:
        signal.disconnect(receiver)
    assert run.status == "completed" and run.output_text == "done"
    retries = [e.payload for e in events if e.type == "model.rate_limited"]
    assert [r["attempt"] for r in retries] == [1, 2]
    assert all(0.05 <= r["wait"] <= 0.06 for r in retries)
    assert client.requests[0] == client.requests[1] == client.requests[2]


def test_retries_are_bounded_and_then_fail_the_turn_as_a_model_error(monkeypatch: Any) -> None:
    monkeypatch.setattr(throttling, "RATE_LIMITED_RETRIES", 2)
    client = refusing(10, retry_after=0.0)
    run = Agent("bounded", instructions="x", client=client).run("hi")
    assert run.status == "failed" and len(client.requests) == 3
    assert "429" in str(run.error)


def test_a_retry_after_past_the_deadline_fails_the_turn_as_a_timeout() -> None:
    client = refusing(1, retry_after=3600)
    run = Agent("late", instructions="x", client=client, timeout=30).run("hi")
    assert run.status == "failed" and len(client.requests) == 1
    assert "timed out" in str(run.error)


def test_other_model_errors_are_not_retried() -> None:
    def respond(request: ModelRequest) -> Any:
        raise ModelError("HTTP 400 invalid_request_error")

    client = FunctionClient(respond)
    run = Agent("plain", instructions="x", client=client).run("hi")
    assert run.status == "failed" and len(client.requests) == 1


def test_waiting_for_a_slot_past_the_deadline_fails_the_turn_as_a_timeout(settings: Any) -> None:
    settings.TURNKIT = {"PROVIDER_LIMITS": {"function": {"concurrency": 1}}}
    held = throttling.limiter()
    assert held.try_acquire("function", Quota(concurrency=1), 0, "holder", 600).granted
    try:
        client = FunctionClient(lambda request: reply("never"))
        run = Agent("starved", instructions="x", client=client, timeout=0.3).run("hi")
    finally:
        held.release("function", "holder")
    assert run.status == "failed" and client.requests == []
    assert "timed out" in str(run.error)
