"""Operators see the turns waiting for a provider slot or backing off after a 429.

The wait itself holds no session: one short write on the turn's lease marks it when a wait
starts, one clears it when the request goes out; a call that never waits writes nothing more.
The observations here are made from inside the wait (the sleep), as another process would.
"""

from __future__ import annotations

import io
import time
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from turnkit_django import Agent
from turnkit_django.base.throttles import Quota
from turnkit_django.clients import ModelRequest
from turnkit_django.exceptions import ModelRateLimited
from turnkit_django.models import Lease, Turn
from turnkit_django.runtime import throttling
from turnkit_django.store import provider_waits
from turnkit_django.testing import FunctionClient, reply

pytestmark = pytest.mark.django_db


def observe_during_sleep(monkeypatch: Any, look: Any) -> list[Any]:
    """Call ``look()`` on the first sleep of a wait (the clock is the only thing faked)."""
    seen: list[Any] = []
    real = time.sleep

    def sleep(seconds: float) -> None:
        if not seen:
            seen.append(look())
        real(min(seconds, 0.01))

    monkeypatch.setattr(throttling.time, "sleep", sleep)
    return seen


def admin() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    return client


def snapshot(client: Client) -> dict[str, Any]:
    turn = Turn.objects.get()
    stats = io.StringIO()
    call_command("turnkit_stats", stdout=stats)
    inspect = io.StringIO()
    call_command("turnkit_inspect", turn.pk, stdout=inspect)
    return {
        "waiting": list(provider_waits.waiting().values_list("turn_id", "waiting_on")),
        "stats": stats.getvalue(),
        "inspect": inspect.getvalue(),
        "page": client.get(reverse("admin:turnkit_turn_change", args=[turn.pk])).content.decode(),
        "list": client.get(reverse("admin:turnkit_turn_changelist")).content.decode(),
    }


def test_a_turn_backing_off_after_a_429_is_seen_waiting_and_cleared_once_sent(
        monkeypatch: Any) -> None:
    client = admin()
    seen = observe_during_sleep(monkeypatch, lambda: snapshot(client))
    count = [0]

    def respond(request: ModelRequest) -> Any:
        count[0] += 1
        if count[0] == 1:
            raise ModelRateLimited("HTTP 429", status=429, retry_after=1)
        assert not Lease.objects.exclude(waiting_since=None).exists()  # cleared before sending
        return reply("done")

    run = Agent("patient", instructions="x", client=FunctionClient(respond)).run("hi")
    assert run.status == "completed"
    [during] = seen
    assert during["waiting"] == [(run.id, "function")]
    assert "waiting for a provider slot: 1 (function 1)" in during["stats"]
    assert "waiting for a provider slot (function, since" in during["inspect"]
    assert "waiting for a provider slot (function, since" in during["page"]
    assert "1 turn waiting for a provider slot" in during["list"]
    assert not Lease.objects.exclude(waiting_since=None).exists()
    after = snapshot(client)
    assert after["waiting"] == [] and "provider slot" not in after["page"]
    assert "waiting for a provider slot: 0" in after["stats"]


def test_a_turn_waiting_for_a_concurrency_slot_is_seen_waiting(
        settings: Any, monkeypatch: Any) -> None:
    settings.TURNKIT = {"PROVIDER_LIMITS": {"function": {"concurrency": 1}}}
    held = throttling.limiter()
    assert held.try_acquire("function", Quota(concurrency=1), 0, "holder", 600).granted

    def look() -> list[Any]:
        found = list(provider_waits.waiting().values_list("waiting_on", flat=True))
        held.release("function", "holder")
        return found

    seen = observe_during_sleep(monkeypatch, look)
    run = Agent("queued", instructions="x",
                client=FunctionClient(lambda request: reply("ok"))).run("hi")
    assert run.status == "completed" and seen == [["function"]]
    assert not Lease.objects.exclude(waiting_since=None).exists()


def test_a_call_that_never_waits_writes_no_mark(settings: Any) -> None:
    settings.TURNKIT = {"PROVIDER_LIMITS": {"function": {"concurrency": 5}}}
    agent = Agent("fast", instructions="x", client=FunctionClient(lambda request: reply("ok")))
    agent.run("warm up")
    with_limits = count_statements(agent)
    settings.TURNKIT = {}
    assert count_statements(agent) == with_limits


def count_statements(agent: Agent) -> int:
    with CaptureQueriesContext(connection) as queries:
        assert agent.run("hi").status == "completed"
    return len(queries)
