"""Agents of the nemesis soak (``tests/soak``), registered in every process with ``agents.py``.

They answer from a script in their input like the e2e agents (:mod:`tests.testapp.agents`), so
any worker gives the same answer after a crash, and a step may also carry:

* ``"sleep": seconds`` spent inside the model call, so faults land during model calls too;
* ``"calls": [...]``: several tool calls in one response (a fan-out of sub-agents);
* the argument value ``"$launched"``: the turn ids ``launch_agent`` returned earlier in this
  turn (so a script can ``wait_for`` the children it launched).

The script is the turn's newest user message when it parses as one (or the message before the
joined results of an application wait); a turn whose input is something else (a continuation
answering a delivery or a completion callback) replies at once.

``soak_root`` delegates to ``soak_child`` (a sub-agent tool) and launches it; ``soak_child``
launches ``soak_leaf``; all three have the effect tools, and the first two ``send_message``.
"""

from __future__ import annotations

import json
import time
from typing import Any

from turnkit_django import Agent, register
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.messages import ChatMessage
from turnkit_django.testing import Entry, FunctionClient, call, reply
from turnkit_django.tools import launch_agent, send_message, wait_for

from .agents import safe_effect, span, unsafe_effect
from .ledger import record

LAUNCHED = "$launched"


def _script(message: ChatMessage) -> dict[str, Any] | None:
    try:
        script = json.loads(message.text)
    except ValueError:
        return None
    return script if isinstance(script, dict) and "steps" in script else None


def _input(messages: list[ChatMessage]) -> tuple[dict[str, Any], int]:
    """The script this request follows and the index of its message (-1: none)."""
    users = [i for i, m in enumerate(messages) if m.role == "user"]
    candidates = users[-1:]
    if users and (messages[users[-1]].metadata or {}).get("source") == "wait_for":
        candidates = users[-2:-1]  # an application wait: the script is before the results
    for index in candidates:
        script = _script(messages[index])
        if script is not None:
            return script, index
    return {}, -1


def _launched(messages: list[ChatMessage]) -> list[str]:
    """Turn ids returned by this turn's ``launch_agent`` calls, in call order."""
    ids = []
    for message in messages:
        for result in message.tool_results:
            content = result.content
            if isinstance(content, str):
                try:
                    content = json.loads(content)
                except ValueError:
                    continue
            if result.name == "launch_agent" and isinstance(content, dict) and content.get(
                    "turn_id"):
                ids.append(str(content["turn_id"]))
    return ids


def _call(step: dict[str, Any], launched: list[str], call_id: str) -> Entry:
    args = {k: (launched if v == LAUNCHED else v) for k, v in step.get("args", {}).items()}
    return call(step["call"], id=call_id, **args)


def respond(request: ModelRequest) -> Entry:
    messages = list(request.messages)
    script, at = _input(messages)
    turn_id = request.metadata.get("turn_id")
    after = messages[at + 1:] if at >= 0 else []
    step = sum(1 for m in after if m.role == "assistant")
    steps = script.get("steps") or []
    entry: dict[str, Any] = steps[step] if step < len(steps) else {"reply": "done"}
    record("model", turn=turn_id, step=step)
    if entry.get("sleep"):
        time.sleep(float(entry["sleep"]))
    record("model.done", turn=turn_id, step=step)
    launched = _launched(after)
    if "calls" in entry:
        return [_call(c, launched, f"call_{turn_id}_{step}_{i}")
                for i, c in enumerate(entry["calls"])]
    if "call" in entry:
        return _call(entry, launched, f"call_{turn_id}_{step}")
    return reply(str(entry.get("reply", "done")))


_client = FunctionClient(respond)
_effects = [unsafe_effect, safe_effect, span]

leaf = Agent("soak_leaf", description="Does one scripted job.", tools=_effects, client=_client)
child = Agent("soak_child", description="Does a scripted job, maybe launching a leaf.",
              tools=[*_effects, launch_agent, wait_for, send_message], sub_agents=[leaf],
              client=_client)
root = register(Agent("soak_root", instructions="Follow the script.",
                      tools=[*_effects, launch_agent, wait_for, send_message],
                      sub_agents=[child], client=_client))
