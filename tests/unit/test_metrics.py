"""Metrics through OpenTelemetry (issue 40): values read with the SDK's in-memory reader after
real turns, and a module that costs nothing when OpenTelemetry is not installed."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader

from tests.helpers import crash
from turnkit_django import Agent, reconcile
from turnkit_django.models import Turn
from turnkit_django.observability import metrics
from turnkit_django.testing import FunctionClient, ScriptedClient, reply

pytestmark = pytest.mark.django_db


@pytest.fixture
def reader() -> Iterator[InMemoryMetricReader]:
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    assert metrics.configure(provider, live_turns=True)
    yield reader
    metrics.configure(None)
    provider.shutdown()


def points(reader: InMemoryMetricReader, name: str) -> list[Any]:
    data = reader.get_metrics_data()
    found: list[Any] = []
    for resource in data.resource_metrics if data else ():
        for scope in resource.scope_metrics:
            for metric in scope.metrics:
                if metric.name == name:
                    found.extend(metric.data.data_points)
    return found


def by(reader: InMemoryMetricReader, name: str, key: str) -> dict[Any, Any]:
    return {p.attributes.get(key): p.value for p in points(reader, name)}


@pytest.fixture
def committed(django_capture_on_commit_callbacks):
    """Run what the test's transaction defers to its commit (facts are recorded then)."""
    return lambda: django_capture_on_commit_callbacks(execute=True)


def test_an_inline_turn_counts_its_outcome_tokens_and_model_call(reader, committed):
    client = ScriptedClient([reply("hi", usage={"input_tokens": 12, "output_tokens": 5})])
    with committed():
        run = Agent("metered", client=client, model="gpt-4o-mini").run("hello")
    assert run.status == "completed", run.error

    assert by(reader, "turnkit.turns.finished", "outcome") == {"completed": 1}
    (calls,) = points(reader, "turnkit.model.duration")
    assert calls.count == 1 and dict(calls.attributes) == {"agent": "metered",
                                                           "model": "gpt-4o-mini"}
    tokens = {p.attributes["type"]: p.value for p in points(reader, "turnkit.model.tokens")}
    assert tokens == {"input": 12, "output": 5}
    (turns,) = points(reader, "turnkit.turn.duration")
    assert turns.count == 1 and turns.attributes["outcome"] == "completed"
    cost = points(reader, "turnkit.model.cost")
    row = Turn.objects.get(pk=run.id)
    if row.cost_unknown:
        assert cost == []
    else:
        assert Decimal(str(cost[0].value)).quantize(row.cost) == row.cost


def test_a_failed_turn_is_counted_as_failed(reader, committed):
    client = ScriptedClient([])  # no answer: the model call raises, the turn fails
    with committed():
        run = Agent("failing", client=client).run("hello")
    assert run.status == "failed"
    assert by(reader, "turnkit.turns.finished", "outcome") == {"failed": 1}
    (calls,) = points(reader, "turnkit.model.duration")
    assert calls.count == 1 and calls.attributes["error.type"] == "ModelError"


@pytest.mark.usefixtures("background")
def test_a_reconcile_counts_the_lease_expiry_and_the_recovery(reader, registered, committed):
    agent = registered(Agent("recovered", client=FunctionClient(lambda request: reply("ok"))))
    run = agent.submit("task")
    crash(run.id, "before_model_call")

    with committed():
        assert reconcile().recovered == [run.id]
    assert sum(p.value for p in points(reader, "turnkit.turn.recoveries")) == 1
    assert sum(p.value for p in points(reader, "turnkit.turn.lease_expiries")) == 1


def test_live_turns_are_read_from_the_database_when_collected(reader):
    agent = Agent("live", client=ScriptedClient([]))
    agent.prepare("one")
    agent.prepare("two")
    assert by(reader, "turnkit.turns.live", "status") == {
        "pending": 2, "waiting": 0, "paused": 0, "running": 0}


def test_the_module_is_a_no_op_without_opentelemetry():
    code = (
        "import sys; sys.modules['opentelemetry'] = None\n"
        "import django, os\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'tests.settings')\n"
        "django.setup()\n"
        "from turnkit_django import metrics\n"
        "assert not metrics.enabled() and not metrics.configure(live_turns=True)\n"
        "with metrics.model_call('a', 'm'):\n"
        "    pass\n"
        "metrics.turn_recovered(); metrics.lease_expired()\n"
        "assert metrics.turn_event('turn.completed', {}, None) is None\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          check=False, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"


def test_a_call_waiting_out_a_429_counts_as_waiting_for_its_provider(reader, monkeypatch):
    from turnkit_django.exceptions import ModelRateLimited
    from turnkit_django.runtime import throttling

    seen: list[dict[Any, Any]] = []

    def sleep(seconds: float) -> None:  # the clock is the only thing faked
        seen.append(by(reader, "turnkit.model.slot_waits", "limit"))

    monkeypatch.setattr(throttling.time, "sleep", sleep)
    calls = [0]

    def respond(request: Any) -> Any:
        calls[0] += 1
        if calls[0] == 1:
            raise ModelRateLimited("HTTP 429", status=429, retry_after=1)
        return reply("done")

    Agent("patient", client=FunctionClient(respond)).run("hello")
    assert seen == [{"function": 1}]  # one call waiting on its provider, during the wait
    assert by(reader, "turnkit.model.slot_waits", "limit") == {"function": 0}
