"""Agents for the e2e tier, registered in every process (web, Celery workers, test process).

``e2e_scripted`` answers from a script carried in the turn's input: the last user message is JSON
``{"steps": [...]}`` and the model answers step *n* with *n* = the number of assistant messages
after that input, so the answer depends only on the transcript and any worker gives the same one.
A step is ``{"call": tool, "args": {...}}``, ``{"reply": text}``, optionally with ``"gate": name``
(block the first model call that reaches it, see :func:`tests.testapp.ledger.gate`) or
``"hold": name`` (stop every model call that reaches it while the test holds it), optionally
with ``"seconds": s`` (the model takes that long to answer, as a provider would), and optionally
with ``"fail": name`` (the provider errors on the first ``"failures"``, default 1, model calls
that reach a step with that name, counted in the ledger across workers).

The tools write their side effects to the ledger with the tool execution's idempotency key.
"""

from __future__ import annotations

import json
import os
import signal
import time
from typing import Any

from turnkit_django import Agent, ModelError, ToolContext, register, tool
from turnkit_django.clients import OpenAIClient
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.events import Event
from turnkit_django.events import event as any_event
from turnkit_django.testing import Entry, FunctionClient, call, reply

from .ledger import armed_gate, count, gate, hold, record

SCRIPTED_AGENT = "e2e_scripted"


def script_step(request: ModelRequest) -> tuple[dict[str, Any], int]:
    """The script of the request's newest input and the step this request is at."""
    messages = request.messages
    inputs = [i for i, m in enumerate(messages) if m.role == "user"]
    if not inputs:
        return {}, 0
    try:
        script = json.loads(messages[inputs[-1]].text)
    except ValueError:
        script = {}
    step = sum(1 for m in messages[inputs[-1] + 1:] if m.role == "assistant")
    return (script if isinstance(script, dict) else {}), step


def respond(request: ModelRequest) -> Entry:
    script, step = script_step(request)
    turn_id = request.metadata.get("turn_id")
    steps = script.get("steps") or []
    entry = steps[step] if step < len(steps) else {"reply": "done"}
    record("model", turn=turn_id, step=step)
    if entry.get("gate"):
        gate(entry["gate"], turn=turn_id, step=step)
    if entry.get("hold"):  # every model call reaching it waits while the test holds it
        hold(entry["hold"], turn=turn_id, step=step)
    if entry.get("seconds"):  # the provider's latency, not a synchronization
        time.sleep(float(entry["seconds"]))
    if entry.get("fail"):  # a provider down for the first calls (run.retry() in e2e)
        number = count("model.fail", label=entry["fail"]) + 1
        record("model.fail", turn=turn_id, step=step, label=entry["fail"])
        if number <= int(entry.get("failures", 1)):
            raise ModelError(f"{entry['fail']}: provider unavailable (call {number})")
    record("model.done", turn=turn_id, step=step)
    if "call" in entry:
        return call(entry["call"], id=f"call_{turn_id}_{step}", **entry.get("args", {}))
    if "calls" in entry:  # several calls in one response
        return [call(c["call"], id=f"call_{turn_id}_{step}_{i}", **c.get("args", {}))
                for i, c in enumerate(entry["calls"])]
    return reply(str(entry.get("reply", "done")))


def _effect(tool_name: str, ctx: ToolContext, label: str, hold: str, seconds: float) -> str:
    record("effect", tool=tool_name, key=ctx.idempotency_key, turn=ctx.turn.id,
           call=ctx.tool_call_id, label=label)
    gate(hold, turn=ctx.turn.id, call=ctx.tool_call_id)
    if seconds:
        time.sleep(seconds)  # the window between the effect and its recorded result
    return f"{label}: done"


@tool
def unsafe_effect(ctx: ToolContext, label: str, hold: str = "", seconds: float = 0) -> str:
    """Apply a side effect that must not run twice, then wait at gate ``hold``, then sleep."""
    return _effect("unsafe_effect", ctx, label, hold, seconds)


@tool(recovery="replay_safe")
def safe_effect(ctx: ToolContext, label: str, hold: str = "", seconds: float = 0) -> str:
    """Apply an idempotent side effect (keyed), then wait at gate ``hold``, then sleep."""
    return _effect("safe_effect", ctx, label, hold, seconds)


def _flaky(tool_name: str, ctx: ToolContext, label: str, failures: int, hold: str,
           hold_at: int) -> str:
    """A keyed effect of a service whose first ``failures`` calls (per key, counted in the
    ledger across workers) time out; the call numbered ``hold_at`` waits at gate ``hold``."""
    number = count("effect", key=ctx.idempotency_key) + 1
    record("effect", tool=tool_name, key=ctx.idempotency_key, turn=ctx.turn.id,
           call=ctx.tool_call_id, label=label, attempt=number)
    if number == hold_at:
        gate(hold, turn=ctx.turn.id, call=ctx.tool_call_id, attempt=number)
    if number <= failures:
        raise TimeoutError(f"{label}: call {number} timed out")
    return f"{label}: done at call {number}"


@tool(recovery="replay_safe", retries=3, retry_on=(TimeoutError,), backoff=2.0)
def flaky_effect(ctx: ToolContext, label: str, failures: int = 2, hold: str = "",
                 hold_at: int = 0) -> str:
    """Apply an idempotent effect whose first ``failures`` calls time out (retried, 2 s, 4 s
    apart); call number ``hold_at`` waits at gate ``hold``."""
    return _flaky("flaky_effect", ctx, label, failures, hold, hold_at)


@tool(recovery="replay_safe", retries=1, retry_on=(TimeoutError,), backoff=15.0)
def slow_retry_effect(ctx: ToolContext, label: str, failures: int = 1) -> str:
    """As flaky_effect, retried once after a 15 s backoff (a worker shutting down meanwhile)."""
    return _flaky("slow_retry_effect", ctx, label, failures, "", 0)


@tool(approval=True)
def approved_refund(ctx: ToolContext, label: str, hold: str = "") -> str:
    """Refund, once a person approved the call (a side effect that must not run twice)."""
    return _effect("approved_refund", ctx, label, hold, 0)


@tool
def span(ctx: ToolContext, label: str, seconds: float = 0.2) -> str:
    """Record when this call starts and ends, ``seconds`` apart."""
    record("span.start", turn=ctx.turn.id, label=label)
    time.sleep(seconds)
    record("span.end", turn=ctx.turn.id, label=label)
    return label


@tool(recovery="replay_safe")
def poison(ctx: ToolContext) -> str:
    """Kill the process running it, every time it is (re-)run."""
    record("poison", turn=ctx.turn.id, key=ctx.idempotency_key)
    os.kill(os.getpid(), signal.SIGKILL)
    return "unreachable"


scripted = register(Agent(
    SCRIPTED_AGENT,
    instructions="Follow the script.",
    tools=[unsafe_effect, safe_effect, span, poison, approved_refund, flaky_effect,
           slow_retry_effect],
    client=FunctionClient(respond),
))

# A real HTTP client for tests/e2e/test_provider_waits.py: a fake provider on loopback answers
# (OPENAI_BASE_URL in the workers' environment); no HTTP retries, so the runtime waits out 429s.
provider = register(Agent(
    "e2e_provider",
    instructions="Answer.",
    client=OpenAIClient(model="e2e-limited", api_key="e2e", max_retries=0),
))


def _ledger_event(sender: Any, event: Event, **kwargs: Any) -> None:
    record("event", type=event.type, turn=event.turn_id)
    if event.type == "tool_call.started":  # the call's intent committed, the tool not started
        armed_gate(f"start-{event.turn_id}", turn=event.turn_id)


any_event.connect(_ledger_event, dispatch_uid="turnkit-e2e-ledger")

# The orchestration (tree_agents), TurnKit-parity (issue 16), media (issue 12) and soak scenarios
# register their agents.
from . import media_agents, parity_agents, soak_agents, tree_agents  # noqa: E402, F401
