"""Traces through OpenTelemetry (issue 39): spans read with the SDK's in-memory exporter after
real turns, inline and as a worker runs them, with the trace carried from ``submit()``."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from tests.dispatch import override_turnkit
from tests.helpers import run_all
from turnkit_django import Agent, SubAgentTool, tool
from turnkit_django.models import Turn
from turnkit_django.observability import tracing
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

SECRET_TASK = "Where is order A-1? my card is 4111"


@tool(recovery="replay_safe")
def lookup(order: str) -> dict[str, str]:
    """Find an order."""
    return {"order": order, "status": "shipped"}


@tool
def broken(order: str) -> str:
    """Always fails."""
    raise RuntimeError("the warehouse is down")


@pytest.fixture
def provider() -> Iterator[tuple[TracerProvider, InMemorySpanExporter]]:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracing.configure(provider)
    yield provider, exporter
    tracing.configure(None)
    provider.shutdown()


@pytest.fixture
def spans(provider) -> Iterator[InMemorySpanExporter]:
    with override_turnkit(TRACING=True):
        yield provider[1]


def named(exporter: InMemorySpanExporter, name: str) -> list[ReadableSpan]:
    return [s for s in exporter.get_finished_spans() if s.name == name]


def one(exporter: InMemorySpanExporter, name: str) -> ReadableSpan:
    found = named(exporter, name)
    assert len(found) == 1, [s.name for s in exporter.get_finished_spans()]
    return found[0]


def parent_of(span: ReadableSpan) -> int | None:
    return span.parent.span_id if span.parent is not None else None


def all_values(exporter: InMemorySpanExporter) -> str:
    return repr([dict(s.attributes or {}) for s in exporter.get_finished_spans()]) + repr(
        [e.attributes for s in exporter.get_finished_spans() for e in s.events])


def shop(script: list[Any]) -> Agent:
    return Agent("shop", tools=[lookup, broken], model="gpt-4o-mini",
                 client=ScriptedClient(script))


def test_an_inline_run_has_a_turn_span_with_model_and_tool_spans(spans,
                                                                  django_capture_on_commit_callbacks):
    agent = shop([call("lookup", id="call_1", order="A-1",
                       usage={"input_tokens": 20, "output_tokens": 7}),
                  reply("It shipped.", usage={"input_tokens": 30, "output_tokens": 4})])
    with django_capture_on_commit_callbacks(execute=True):
        run = agent.run(SECRET_TASK)
    assert run.status == "completed", run.error

    turn = one(spans, "invoke_agent shop")
    first, second = sorted(named(spans, "chat gpt-4o-mini"), key=lambda s: s.start_time or 0)
    tool_span = one(spans, "execute_tool lookup")
    assert turn.attributes is not None and first.attributes is not None
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.agent.name"] == "shop"
    for span in (turn, first, second, tool_span):
        assert span.context.trace_id == turn.context.trace_id
        assert span.attributes is not None
        assert span.attributes["turnkit.turn_id"] == run.id
        assert span.attributes["turnkit.agent"] == "shop"
    for child in (first, second, tool_span):
        assert parent_of(child) == turn.context.span_id
    assert dict(first.attributes).items() >= {
        "gen_ai.operation.name": "chat", "gen_ai.provider.name": "scripted",
        "gen_ai.system": "scripted", "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.usage.input_tokens": 20, "gen_ai.usage.output_tokens": 7}.items()
    assert second.attributes is not None and second.attributes["gen_ai.usage.input_tokens"] == 30
    assert tool_span.attributes is not None
    assert dict(tool_span.attributes).items() >= {"gen_ai.operation.name": "execute_tool",
                                                  "gen_ai.tool.name": "lookup",
                                                  "gen_ai.tool.call.id": "call_1"}.items()
    assert turn.status.status_code != StatusCode.ERROR
    # Message text (the task, the tool's arguments and result) is not captured by default.
    assert "4111" not in all_values(spans) and "shipped" not in all_values(spans)


def test_message_text_is_captured_only_when_asked(provider, django_capture_on_commit_callbacks):
    agent = shop([call("lookup", order="A-1"), reply("It shipped.")])
    with override_turnkit(TRACING={"capture_content": True}), \
            django_capture_on_commit_callbacks(execute=True):
        agent.run(SECRET_TASK)
    exporter = provider[1]
    first = sorted(named(exporter, "chat gpt-4o-mini"), key=lambda s: s.start_time or 0)[0]
    assert first.attributes is not None
    assert "4111" in str(first.attributes["gen_ai.input.messages"])
    assert "lookup" in str(first.attributes["gen_ai.output.messages"])
    tool_span = one(exporter, "execute_tool lookup")
    assert tool_span.attributes is not None
    assert "A-1" in str(tool_span.attributes["gen_ai.tool.call.arguments"])
    assert "shipped" in str(tool_span.attributes["gen_ai.tool.call.result"])


def test_an_inline_run_continues_the_callers_trace(spans, provider,
                                                   django_capture_on_commit_callbacks):
    tracer = provider[0].get_tracer("app")
    with tracer.start_as_current_span("GET /orders") as request, \
            django_capture_on_commit_callbacks(execute=True):
        shop([reply("hello")]).run("hi")
    turn = one(spans, "invoke_agent shop")
    assert turn.context.trace_id == request.get_span_context().trace_id
    assert parent_of(turn) == request.get_span_context().span_id


def test_errors_set_the_span_status(spans, django_capture_on_commit_callbacks):
    agent = shop([call("broken", order="A-1")])  # then no reply left: the model call raises
    with django_capture_on_commit_callbacks(execute=True):
        run = agent.run("hi")
    assert run.status == "failed"
    assert one(spans, "execute_tool broken").status.status_code == StatusCode.ERROR
    failed_call = sorted(named(spans, "chat gpt-4o-mini"), key=lambda s: s.start_time or 0)[-1]
    assert failed_call.status.status_code == StatusCode.ERROR
    assert failed_call.attributes is not None
    assert failed_call.attributes["error.type"] == "ModelError"
    turn = one(spans, "invoke_agent shop")
    assert turn.status.status_code == StatusCode.ERROR
    assert turn.attributes is not None and turn.attributes["error.type"]
    assert "warehouse" not in all_values(spans)  # the error's text is message text


def test_a_sub_agent_runs_in_the_same_trace(spans, django_capture_on_commit_callbacks):
    helper = Agent("helper", description="Helps.", client=ScriptedClient([reply("helped")]))
    lead = Agent("lead", tools=[SubAgentTool(helper, name="ask_helper")],
                 client=ScriptedClient([call("ask_helper", task="help me"), reply("done")]))
    with django_capture_on_commit_callbacks(execute=True):
        run = lead.run("go")
    assert run.status == "completed", run.error

    parent = one(spans, "invoke_agent lead")
    delegation = one(spans, "execute_tool ask_helper")
    child = one(spans, "invoke_agent helper")
    child_row = Turn.objects.get(parent_turn_id=run.id)
    assert child.context.trace_id == parent.context.trace_id
    assert parent_of(child) == delegation.context.span_id
    assert child.attributes is not None and child.attributes["turnkit.turn_id"] == child_row.pk
    (child_call,) = [s for s in named(spans, f"chat {child_row.model}")
                     if s.attributes and s.attributes["turnkit.agent"] == "helper"]
    assert parent_of(child_call) == child.context.span_id


def test_a_submitted_turn_runs_in_the_submitters_trace(spans, provider, registered,
                                                       django_capture_on_commit_callbacks):
    agent = registered(Agent("shop", tools=[lookup], model="gpt-4o-mini", client=FunctionClient(
        lambda request: reply("done") if len(request.messages) > 1 else call("lookup",
                                                                             order="A-1"))))
    tracer = provider[0].get_tracer("app")
    with tracer.start_as_current_span("POST /orders") as request, \
            django_capture_on_commit_callbacks(execute=True):
        run = agent.submit("where is A-1?")
    assert spans.get_finished_spans()[-1].name == "POST /orders"  # nothing ran yet
    run_all(django_capture_on_commit_callbacks)  # as the worker would, outside the request
    assert Turn.objects.get(pk=run.id).status == "completed"

    turn = one(spans, "invoke_agent shop")
    assert turn.context.trace_id == request.get_span_context().trace_id
    assert parent_of(turn) == request.get_span_context().span_id
    assert parent_of(one(spans, "execute_tool lookup")) == turn.context.span_id
    assert all(parent_of(s) == turn.context.span_id for s in named(spans, "chat gpt-4o-mini"))


def test_background_sub_agents_and_a_callback_continue_the_trace(
        spans, provider, registered, django_capture_on_commit_callbacks):
    helper = registered(Agent("helper", description="Helps.",
                              client=FunctionClient(lambda request: reply("helped"))))
    lead = registered(Agent("lead", tools=[SubAgentTool(helper, name="ask_helper")],
                            client=FunctionClient(lambda request: reply("done") if any(
                                m.tool_results for m in request.messages)
                                else call("ask_helper", task="help me"))))
    listener = registered(Agent("listener", client=FunctionClient(lambda r: reply("noted"))))
    conversation = listener.conversation()
    with provider[0].get_tracer("app").start_as_current_span("POST /jobs") as request, \
            django_capture_on_commit_callbacks(execute=True):
        run = lead.submit("go", callback=conversation)
    run_all(django_capture_on_commit_callbacks)
    assert Turn.objects.get(pk=run.id).status == "completed"

    trace_id = request.get_span_context().trace_id
    turns = [s for s in spans.get_finished_spans() if s.name.startswith("invoke_agent ")]
    assert {s.name for s in turns} == {"invoke_agent lead", "invoke_agent helper",
                                       "invoke_agent listener"}
    assert {s.context.trace_id for s in turns} == {trace_id}
    assert all(parent_of(s) is not None for s in turns)
    # The delegating call has its execute_tool span too, and the child it launched is under it.
    launch = one(spans, "execute_tool ask_helper")
    lead_turns = {s.context.span_id for s in turns if s.name == "invoke_agent lead"}
    assert parent_of(launch) in lead_turns
    assert parent_of(one(spans, "invoke_agent helper")) == launch.context.span_id


def test_no_spans_when_tracing_is_off(provider, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=True):
        run = shop([call("lookup", order="A-1"), reply("done")]).run("hi")
    assert run.status == "completed"
    assert provider[1].get_finished_spans() == ()
    assert "trace" not in Turn.objects.get(pk=run.id).options


def test_nothing_is_imported_when_off_and_nothing_breaks_without_opentelemetry():
    code = (
        "import sys, os\n"
        "os.environ.setdefault('DJANGO_SETTINGS_MODULE', 'tests.settings')\n"
        "import django; django.setup()\n"
        "from django.test import override_settings\n"
        "from django.conf import settings\n"
        "from turnkit_django import tracing\n"
        "with tracing.turn_span('t', 'a', None):\n"
        "    pass\n"
        "assert 'opentelemetry.trace' not in sys.modules, 'imported while off'\n"
        "sys.modules['opentelemetry'] = None\n"
        "with override_settings(TURNKIT={**settings.TURNKIT, 'TRACING': True}):\n"
        "    assert not tracing.enabled() and tracing.carrier(None) is None\n"
        "    with tracing.turn_span('t', 'a', None):\n"
        "        pass\n"
        "print('ok')\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=120, check=False)
    assert done.stdout.strip() == "ok", done.stderr
