"""Workload T and its agents: model, tool, model, tool, model with an instant fake model.

Imported after Django is set up (by the benchmarks, and by the bench's Celery workers through
``bench.tasks``). The fake model is a ``FunctionClient``: each answer is computed from the
request, so a worker process answers exactly as the benchmark process would.
"""

from __future__ import annotations

import json
import os
import time
from typing import Any

from turnkit_django import Agent, ToolContext, register, tool
from turnkit_django.clients import ModelRequest
from turnkit_django.events import event as any_event
from turnkit_django.testing import FunctionClient, call, reply

# The test app (in the settings the benchmark shares with the tests) listens to every event for
# the e2e ledger, a no-op outside that tier. An application nobody listens to builds no event at
# all (turnkit_django.events.emit): that is the cost measured here.
any_event.disconnect(dispatch_uid="turnkit-e2e-ledger")

STEPS_PER_TURN = 5  # workload T
#: Automatic compaction on a small context, so that it checks (estimate, then choose) at every
#: model step of a conversation with a few dozen asks.
SMALL_CONTEXT = {"context_limit": 4_000, "reserved_tokens": 1_000, "threshold": 0.5}


def no_dispatch(turn_id: str) -> None:
    """The benchmark executes turns itself; nothing is sent to a broker."""


@tool
def probe(n: int) -> dict[str, int]:
    """Return its input."""
    return {"n": n}


def _tool_results_this_turn(request: ModelRequest) -> int:
    """Tool results after the last user message (the current turn's)."""
    done = 0
    for message in reversed(request.messages):
        if message.role == "user" and not message.tool_results:
            break
        if message.role == "tool" or message.tool_results:
            done += 1
    return done


#: The usage the instant model reports, as a provider does (without it the fake model estimates
#: usage from the whole request, a cost of the fake, not of turnkit-django).
USAGE = {"input_tokens": 100, "output_tokens": 10}


def _answer(calls: int, *, reuse_ids: bool = False) -> Any:
    def respond(request: ModelRequest) -> Any:
        if request.metadata.get("purpose") == "compaction":
            return reply("The user asked questions; the probe answered each one.", usage=USAGE)
        done = _tool_results_this_turn(request)
        if done < calls:
            return call("probe", id=f"call_{done}" if reuse_ids else None, usage=USAGE, n=done)
        return reply("done", usage=USAGE)

    return respond


#: Workload T: five steps.
T5 = register(Agent("bench", tools=[probe], client=FunctionClient(_answer(2)),
                    max_iterations=10))
#: model, tool, model: what the throughput benchmark submits.
T3 = register(Agent("bench-3", tools=[probe], client=FunctionClient(_answer(1)),
                    max_iterations=10))
#: One conversation asked again and again (the growth curve): model, tool, model per ask.
CHAT = register(Agent("bench-chat", tools=[probe], client=FunctionClient(_answer(1)),
                      max_iterations=10, compaction=False))
#: The same with automatic compaction on a small context and tool-call ids reused across turns.
CHAT_COMPACTING = register(Agent("bench-chat-compacting", tools=[probe],
                                 client=FunctionClient(_answer(1, reuse_ids=True)),
                                 max_iterations=10, compaction=SMALL_CONTEXT))

#: Seconds each model call of the in-flight benchmark waits, as a provider would.
LIVE_MODEL_SECONDS = float(os.environ.get("BENCH_INFLIGHT_MODEL_SECONDS", "2"))


def _slow(respond: Any, seconds: float = LIVE_MODEL_SECONDS) -> Any:
    def slow(request: ModelRequest) -> Any:
        time.sleep(seconds)  # the provider's latency: the turn holds no session
        return respond(request)

    return slow


#: model (2 s), tool, model (2 s): the in-flight benchmark's turns (bench/inflight.py).
LIVE = register(Agent("bench-live", tools=[probe], client=FunctionClient(_slow(_answer(1))),
                      max_iterations=10))

#: Seconds the one model call of the tenants benchmark's turns waits (bench/tenants.py).
TENANT_MODEL_SECONDS = float(os.environ.get("BENCH_TENANTS_MODEL_SECONDS", "2"))
#: One model call (2 s), then the reply: the tenants benchmark's turns.
TENANT = register(Agent("bench-tenant", client=FunctionClient(
    _slow(lambda request: reply("done", usage=USAGE), TENANT_MODEL_SECONDS)), max_iterations=2))

#: The kill benchmark's ledger (bench/kill.py): one JSON line per model request and per tool
#: effect, appended by every worker process outside turnkit's tables (one write(2) each, so a
#: SIGKILL never leaves half a line).
KILL_LEDGER = os.environ.get("BENCH_KILL_LEDGER", "")


def record(ev: str, **fields: Any) -> None:
    if KILL_LEDGER:
        line = json.dumps({"ev": ev, "pid": os.getpid(), "at": time.time(), **fields}) + "\n"
        fd = os.open(KILL_LEDGER, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        try:
            os.write(fd, line.encode())
        finally:
            os.close(fd)


@tool
def effect(ctx: ToolContext, n: int) -> dict[str, int]:
    """A side effect that must not run twice (recovery "unknown"): recorded in the ledger."""
    record("effect", turn=ctx.turn.id, call=ctx.tool_call_id)
    return {"n": n}


def _recorded(respond: Any) -> Any:
    def model(request: ModelRequest) -> Any:
        record("model", turn=request.metadata.get("turn_id"),
               step=_tool_results_this_turn(request))
        return respond(request)

    return model


def _answer_effect(request: ModelRequest) -> Any:
    if _tool_results_this_turn(request):
        return reply("done", usage=USAGE)
    return call("effect", usage=USAGE, n=0)


#: model (2 s), effect (not replay-safe), model (2 s), each model request and effect in the
#: ledger: the turns the kill benchmark SIGKILLs a worker under (bench/kill.py).
KILL = register(Agent("bench-kill", tools=[effect],
                      client=FunctionClient(_recorded(_slow(_answer_effect))),
                      max_iterations=10))


__all__ = ["CHAT", "CHAT_COMPACTING", "KILL", "LIVE", "LIVE_MODEL_SECONDS", "SMALL_CONTEXT",
           "STEPS_PER_TURN", "T3", "T5", "TENANT", "TENANT_MODEL_SECONDS", "no_dispatch",
           "probe"]
