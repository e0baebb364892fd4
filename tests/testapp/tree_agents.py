"""Agents of the e2e orchestration scenarios, registered in every process with ``agents.py``.

They answer from a script in their input, like ``e2e_scripted`` (:mod:`tests.testapp.agents`),
and a step may also be ``{"calls": [{"call": tool, "args": {...}}, ...], "usage": {...}}``:
several tool calls in one response (a fan-out), with the response's usage. A sub-agent's task
is its own script, so a test scripts a whole tree:

* ``e2e_orchestrator`` delegates to ``e2e_child`` (a sub-agent tool taking ``task``);
* ``e2e_child`` has the effect tools and ``launch_agent`` for its own sub-agent ``e2e_leaf``.
"""

from __future__ import annotations

from typing import Any

from turnkit_django import Agent, register
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.testing import Entry, FunctionClient, call, reply
from turnkit_django.tools import launch_agent, wait_for

from .agents import safe_effect, script_step, span, unsafe_effect
from .ledger import gate, record


def respond(request: ModelRequest) -> Entry:
    script, step = script_step(request)
    turn_id = request.metadata.get("turn_id")
    steps = script.get("steps") or []
    entry: dict[str, Any] = steps[step] if step < len(steps) else {"reply": "done"}
    record("model", turn=turn_id, step=step)
    if entry.get("gate"):
        gate(entry["gate"], turn=turn_id, step=step)
    record("model.done", turn=turn_id, step=step)
    if "calls" in entry:  # the response's usage, when given, rides on its first call
        return [call(c["call"], id=f"call_{turn_id}_{step}_{i}",
                     usage=entry.get("usage") if i == 0 else None, **c.get("args", {}))
                for i, c in enumerate(entry["calls"])]
    if "call" in entry:
        return call(entry["call"], id=f"call_{turn_id}_{step}", **entry.get("args", {}))
    return reply(str(entry.get("reply", "done")))


_client = FunctionClient(respond)
_effects = [unsafe_effect, safe_effect, span]

leaf = Agent("e2e_leaf", description="Does one scripted job.", tools=_effects, client=_client)
child = Agent("e2e_child", description="Does a scripted job, maybe launching a leaf.",
              tools=[*_effects, launch_agent, wait_for], sub_agents=[leaf], client=_client)
orchestrator = register(Agent("e2e_orchestrator", instructions="Follow the script.",
                              tools=[*_effects, launch_agent, wait_for], sub_agents=[child],
                              client=_client))
