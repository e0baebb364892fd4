"""One OpenTelemetry trace from ``submit()`` through real Celery workers (issue 39, done-when 3).

The test process traces with the SDK's in-memory exporter and submits inside its own "request"
span; the workers (``TURNKIT_E2E_SPANS``: ``TRACING`` on, every span written as a JSON line by
``tests/testapp/span_file.py``) run the turn, its model and tool calls, and a background sub-agent.
Every worker span is in the request's trace: the turn's spans are children of the request span,
the child agent's turn a child of the parent's turn span that launched it.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from tests.e2e.harness import Cluster, script, wait_for, wait_terminal
from tests.testapp import span_file
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import TurnStatus
from turnkit_django.models import Turn
from turnkit_django.observability import tracing

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def exporter(e2e_settings: None, settings: Any) -> Iterator[
        tuple[TracerProvider, InMemorySpanExporter]]:
    """The test process's own tracer provider, with TRACING on for ``submit()``."""
    settings.TURNKIT = {**settings.TURNKIT, "TRACING": True}
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracing.configure(provider)
    try:
        yield provider, memory
    finally:
        tracing.configure(None)
        provider.shutdown()


def named(spans: list[dict[str, Any]], name: str) -> list[dict[str, Any]]:
    return [s for s in spans if s["name"] == name]


@pytest.mark.timeout(120)
def test_one_trace_from_submit_through_the_worker_and_a_child_agent(
        cluster: Cluster, exporter: tuple[TracerProvider, InMemorySpanExporter]) -> None:
    provider, memory = exporter
    spans_path = cluster.root / "spans.jsonl"
    cluster.start(1, env={span_file.SPANS_ENV: str(spans_path)})

    usage = {"input_tokens": 11, "output_tokens": 3}
    steps = script(
        {"calls": [{"call": "safe_effect", "args": {"label": "traced"}}], "usage": usage},
        {"calls": [{"call": "e2e_child", "args": {"task": script({"reply": "child done"})}}]},
        {"reply": "joined"})
    with provider.get_tracer("e2e").start_as_current_span("request") as request:
        root_id = get_agent("e2e_orchestrator").submit(steps).id
    trace_id = f"{request.get_span_context().trace_id:032x}"
    request_id = f"{request.get_span_context().span_id:016x}"
    assert [s.name for s in memory.get_finished_spans()] == ["request"]
    assert Turn.objects.get(pk=root_id).options["trace"]["traceparent"].split("-")[1:3] == [
        trace_id, request_id]

    root = wait_terminal([root_id], timeout=60)[root_id]
    assert root.status == TurnStatus.COMPLETED, root.error
    (child,) = Turn.objects.filter(parent_turn_id=root_id)
    assert child.status == TurnStatus.COMPLETED, child.error

    # The parent ran twice (delegating, then joining after its child), the child once; each
    # execution's span is written when it ends, after the turn's status commits.
    def finished() -> list[dict[str, Any]]:
        spans = span_file.read(spans_path)
        done = (len(named(spans, "invoke_agent e2e_orchestrator")) >= 2
                and named(spans, "invoke_agent e2e_child"))
        return spans if done else []

    spans = wait_for(finished, timeout=30, what="the workers' turn spans")

    assert {s["trace_id"] for s in spans} == {trace_id}, "every worker span in the request's trace"
    assert os.getpid() not in {s["pid"] for s in spans}, "spans made by the worker"
    runs = named(spans, "invoke_agent e2e_orchestrator")
    assert len(runs) == 2
    for run in runs:  # both executions continue the context recorded at submit()
        assert run["parent_id"] == request_id
        assert run["attributes"]["gen_ai.operation.name"] == "invoke_agent"
        assert run["attributes"]["gen_ai.agent.name"] == "e2e_orchestrator"
        assert run["attributes"]["turnkit.turn_id"] == root_id
    run_ids = {run["span_id"] for run in runs}

    chats = sorted((s for s in named(spans, f"chat {root.model}")
                    if s["attributes"]["turnkit.turn_id"] == root_id), key=lambda s: s["start"])
    assert len(chats) == 3
    for chat in chats:
        assert chat["parent_id"] in run_ids
        assert chat["attributes"]["gen_ai.operation.name"] == "chat"
        assert chat["attributes"]["gen_ai.request.model"] == root.model
        assert chat["attributes"]["gen_ai.usage.input_tokens"] > 0
        assert chat["attributes"]["gen_ai.usage.output_tokens"] > 0
    assert chats[0]["attributes"]["gen_ai.usage.input_tokens"] == 11
    assert chats[0]["attributes"]["gen_ai.usage.output_tokens"] == 3

    (effect,) = named(spans, "execute_tool safe_effect")
    assert effect["parent_id"] in run_ids
    assert effect["attributes"]["gen_ai.operation.name"] == "execute_tool"
    assert effect["attributes"]["gen_ai.tool.name"] == "safe_effect"
    assert effect["attributes"]["turnkit.turn_id"] == root_id
    assert effect["status"] != "ERROR"

    (child_run,) = named(spans, "invoke_agent e2e_child")
    assert child_run["attributes"]["turnkit.turn_id"] == child.pk
    # A background delegation launches the child under the call's execute_tool span (status
    # "launched": the call's result is recorded at the join), on the worker, in the request's
    # trace.
    first_run = min(runs, key=lambda s: s["start"])
    (launch,) = named(spans, "execute_tool e2e_child")
    assert launch["parent_id"] == first_run["span_id"]
    assert launch["attributes"]["turnkit.tool.status"] == "launched"
    assert child_run["parent_id"] == launch["span_id"]
    assert child.options["trace"]["traceparent"].split("-")[1:3] == [trace_id,
                                                                    launch["span_id"]]
    child_chats = [s for s in spans if s["name"].startswith("chat ")
                   and s["attributes"]["turnkit.turn_id"] == child.pk]
    assert child_chats and all(s["parent_id"] == child_run["span_id"] for s in child_chats)
