"""No lock is held while application code or an evaluator runs (issue 16), on PostgreSQL.

A worker thread runs a background turn and blocks, on an event, inside the agent's tool policy,
inside a typed sub-agent tool's task builder, or inside an evaluator's request. Meanwhile the
test process cancels the turn from its own connection: cancel takes the tree lock, so it could
not finish if the worker held it. Released, the blocked worker's next write finds its claim
revoked: an evaluation's late answer is never recorded, and nothing is charged for it.
"""

from __future__ import annotations

import threading
from typing import Any

import pytest
from pydantic import BaseModel

from tests.concurrency.threads import Worker
from turnkit_django import Agent, SubAgentTool, ToolCall, YesNo, services, tool
from turnkit_django.clients import EvaluatorReply, Usage
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.testing import ScriptedClient, ScriptedEvaluator, call, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

TIMEOUT = 30


class Gate:
    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def block(self, *args: Any) -> None:
        self.entered.set()
        assert self.released.wait(TIMEOUT), "the test never opened the gate"


class Args(BaseModel):
    topic: str


def run_blocked(agent: Agent, gate: Gate) -> str:
    """Submit a run of ``agent``, block its worker at ``gate``, cancel it meanwhile."""
    run = agent.submit("go")
    worker = Worker(services.run_turn, run.id, kind="test")
    worker.start()
    try:
        assert gate.entered.wait(TIMEOUT), "the worker never reached the gate"
        cancel = Worker(services.cancel, Turn.objects.get(pk=run.id))
        cancel.start()
        cancel.outcome(TIMEOUT)  # it got the tree lock: the blocked worker holds none
        assert Turn.objects.get(pk=run.id).status == "cancelled"
    finally:
        gate.released.set()
    worker.outcome()
    return run.id


def test_the_tool_policy_runs_with_no_lock_held(registered):
    gate = Gate()

    @tool
    def act() -> str:
        """Act."""
        return "acted"

    def policy(call: ToolCall) -> None:
        gate.block()

    agent = registered(Agent("policed", tools=[act], tool_policy=policy,
                             client=ScriptedClient([call("act"), reply("done")])))
    turn_id = run_blocked(agent, gate)

    # The cancel closed the call meanwhile; the worker's late result could not replace that.
    assert ToolExecution.objects.get(turn_id=turn_id).status == "interrupted"


def test_a_typed_delegation_builds_its_task_with_no_lock_held(registered):
    gate = Gate()
    helper = Agent("helper_locks", client=ScriptedClient([]))

    def task(args: Args) -> str:
        gate.block()
        return f"About {args.topic}"

    tool_ = SubAgentTool(helper, name="ask", args=Args, task=task)
    agent = registered(Agent("delegating", tools=[tool_],
                             client=ScriptedClient([call("ask", topic="x"), reply("done")])))
    turn_id = run_blocked(agent, gate)

    assert not Turn.objects.filter(parent_turn_id=turn_id).exists()  # no child after the cancel


def test_an_evaluation_in_flight_holds_no_lock_and_its_late_answer_is_dropped(registered):
    gate = Gate()

    def answer(request: Any) -> EvaluatorReply:
        gate.block()
        return EvaluatorReply({"ok": {"probability": 1.0}}, Usage(500, 5), "judge", 200)

    evaluator = ScriptedEvaluator([answer])

    @tool(recovery="replay_safe")
    def check(ctx) -> str:
        """Check."""
        ctx.turn.internal_evaluation(evaluator=evaluator, model="judge", purpose="check",
                                     questions=[YesNo("ok", "Is it ok?")], candidate="x")
        return "checked"

    agent = registered(Agent("evaluating", tools=[check],
                             client=ScriptedClient([call("check"), reply("done")])))
    turn_id = run_blocked(agent, gate)

    row = Turn.objects.get(pk=turn_id)
    (receipt,) = row.state["evaluations"].values()
    assert [a["status"] for a in receipt["attempts"]] == ["uncertain"]  # never committed
    assert "judge" not in (row.usage.get("by_model") or {})
    assert row.usage.get("input_tokens", 0) < 500
