"""Invariants every e2e scenario asserts at its end (testing.md, I1-I5 and I10).

I1-I4 come from the shipped checker, :func:`turnkit_django.verify.assert_invariants`. The e2e tier
adds what only it can see, from the ledger the workers wrote outside turnkit's tables:

* I1: at most one terminal event (completed, failed, cancelled, stale) per turn;
* I2: each submitted input (unique by its nonce) is stored exactly once (the copies a fork or
  a retry holds, messages 1..``forked_at`` of its conversation, aside);
* I5: a non-replay-safe tool execution has at most one ledger effect, exactly one when it
  completed; a replay-safe one has every attempt under its own idempotency key (one effect per key
  once the service deduplicates) and at least one attempt when it completed; no effect carries a
  key that matches no tool execution;
* I10: no advisory lock held, no session idle in a transaction (polled until quiescent).
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import Any

from django.db.models import F

from tests.e2e.harness import Cluster, assert_hygiene
from turnkit_django.agents.registry import get_agent
from turnkit_django.base.states import ToolStatus
from turnkit_django.messages import TextPart, load_parts
from turnkit_django.models import Message, ToolExecution
from turnkit_django.testing.verify import assert_invariants

EFFECT_TOOLS = frozenset({"unsafe_effect", "safe_effect", "approved_refund", "flaky_effect",
                          "slow_retry_effect"})
TERMINAL_EVENTS = frozenset({"turn.completed", "turn.failed", "turn.cancelled", "turn.stale"})


def terminal_event_problems(entries: list[dict[str, Any]]) -> list[str]:
    counts = Counter(e["turn"] for e in entries
                     if e["ev"] == "event" and e["type"] in TERMINAL_EVENTS)
    return [f"I1 turn {turn!r} has {n} terminal events" for turn, n in counts.items() if n > 1]


def input_problems() -> list[str]:
    texts: Counter[str] = Counter()
    stored = Message.objects.filter(role="user").exclude(
        conversation__forked_at__gte=F("sequence"))  # a fork's copies of another's messages
    for content in stored.values_list("content", flat=True):
        texts["".join(p.text for p in load_parts(content) if isinstance(p, TextPart))] += 1
    return [f"I2 input {text[:80]!r} is stored {n} times" for text, n in texts.items() if n > 1]


def side_effect_problems(entries: list[dict[str, Any]]) -> list[str]:
    effects = [e for e in entries if e["ev"] == "effect"]
    per_key = Counter(e["key"] for e in effects)
    keys_of_call: dict[tuple[str, str], set[str]] = defaultdict(set)
    for effect in effects:
        keys_of_call[effect["turn"], effect["call"]].add(effect["key"])
    problems = []
    executions = ToolExecution.objects.filter(tool_name__in=EFFECT_TOOLS).select_related("turn")
    known = set()
    for execution in executions:
        key = execution.idempotency_key
        known.add(key)
        tool = get_agent(execution.turn.agent_name).tool_table()[execution.tool_name]
        count = per_key[key]
        other_keys = keys_of_call[execution.turn_id, execution.tool_call_id] - {key}
        if other_keys:
            problems.append(f"I5 {execution.tool_name} call {execution.tool_call_id!r} ran under "
                            f"other keys {sorted(other_keys)} besides {key!r}")
        completed = execution.status == ToolStatus.COMPLETED
        if not tool.replay_safe and (count > 1 or (completed and count != 1)):
            problems.append(f"I5 non-replay-safe {key} ({execution.status}) has {count} effects")
        if tool.replay_safe and completed and count < 1:
            problems.append(f"I5 replay-safe {key} completed without an effect")
    problems += [f"I5 effect under key {key!r} matches no tool execution"
                 for key in per_key if key not in known]
    return problems


def assert_scenario_invariants(cluster: Cluster) -> None:
    """I1-I5 from the database and the ledger, then I10 (hygiene) once quiescent."""
    assert_invariants()
    entries = cluster.ledger()
    problems = terminal_event_problems(entries) + input_problems() + side_effect_problems(entries)
    assert not problems, "invariants violated:\n  " + "\n  ".join(problems)
    assert_hygiene()
