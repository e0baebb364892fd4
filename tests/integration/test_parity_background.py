"""TurnKit-parity features in background turns on PostgreSQL (issue 16, done-when 1).

Background turns run in this thread through ``services.run_turn`` (what the Celery task does);
crashes are failpoints or a ``SimulatedCrash`` raised where a worker would die, recovered by
``reconcile()`` exactly as in production. Real workers: tests/e2e/test_parity.py.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from pydantic import BaseModel

from tests.dispatch import override_turnkit
from tests.orchestration import fan_out_and_join, recover
from turnkit_django import Agent, SubAgentTool, ToolCall, YesNo, load_turn, services, tool
from turnkit_django.base import failpoints
from turnkit_django.clients import ModelRequest
from turnkit_django.messages import ToolResultPart, load_parts
from turnkit_django.models import Turn
from turnkit_django.testing import Entry, FunctionClient, ScriptedClient, ScriptedEvaluator, call
from turnkit_django.testing import reply as answer

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def resume_after_crash(turn_id: str) -> None:
    recover(turn_id)
    assert services.run_turn(turn_id, kind="test")


def results(turn_id: str) -> list[Any]:
    return [part.content for m in Turn.objects.get(pk=turn_id).messages.filter(role="tool")
            .order_by("sequence") for part in load_parts(m.content)
            if isinstance(part, ToolResultPart)]


class Topic(BaseModel):
    topic: str


def test_typed_delegations_fan_out_and_a_blocked_one_is_answered_in_call_order(
        registered, django_capture_on_commit_callbacks):
    tasks: list[str] = []

    def research(request: ModelRequest) -> Entry:
        tasks.append(request.messages[0].text)
        return answer("found it")

    researcher = Agent("researcher_pg", client=FunctionClient(research))
    tool_ = SubAgentTool(researcher, name="research", args=Topic,
                         task="Find three sources on {topic}.")

    def lead(request: ModelRequest) -> Entry:
        if request.last_message_is_tool_result():
            return answer("joined")
        return [call("research", topic=t) for t in ("tides", "secrets", "moons")]

    def policy(call_: ToolCall) -> Any:
        return ("block", "not that topic") if call_.args.topic == "secrets" else None  # type: ignore[attr-defined]

    agent = registered(Agent("lead_pg", tools=[tool_], tool_policy=policy,
                             client=FunctionClient(lead)))
    run = agent.submit("research")
    children = fan_out_and_join(run.id, django_capture_on_commit_callbacks)

    run.refresh()
    assert run.status == "completed", run.error
    assert sorted(tasks) == ["Find three sources on moons.", "Find three sources on tides."]
    first, blocked, last = results(run.id)
    assert (first["turn_id"], last["turn_id"]) == (children[0].pk, children[1].pk)
    assert blocked == {"error": "tool_policy_blocked", "message": "not that topic",
                       "tool_policy_blocked": True}


def test_a_final_save_crashed_mid_call_runs_again_and_nothing_else_does(registered):
    saved: list[str] = []
    noted: list[str] = []

    @tool(terminal=True, recovery="replay_safe", budget_completion=True)
    def save(ctx, text: str) -> str:
        """Save and end."""
        saved.append(ctx.idempotency_key)
        if len(saved) == 1:
            raise failpoints.SimulatedCrash("the worker died inside the save")
        return f"saved {text}"

    @tool
    def note(text: str) -> str:
        """Note."""
        noted.append(text)
        return "noted"

    script = [[call("save", text="final", usage={"input_tokens": 3, "output_tokens": 0}),
               call("note", text="after")]]
    with override_turnkit(COST_RATES={"priced": {"input": "1000000", "output": "0"}}):
        agent = registered(Agent("saver_pg", model="priced", max_spend=Decimal(2),
                                 tools=[save, note], client=ScriptedClient(script)))
        run = agent.submit("write")
        with pytest.raises(failpoints.SimulatedCrash):
            services.run_turn(run.id, kind="test")
        resume_after_crash(run.id)

    run.refresh()
    assert run.status == "completed", run.error
    assert run.output_text == "saved final" and noted == []
    assert len(set(saved)) == 1 and len(saved) == 2  # the same key both times
    assert agent.client.remaining == 0 and len(agent.client.requests) == 1


def test_an_evaluation_left_uncertain_by_a_dead_worker_is_not_replayed(registered):
    def die(request: Any) -> Any:
        raise failpoints.SimulatedCrash("the worker died during the request")

    evaluator = ScriptedEvaluator([die])

    @tool(recovery="replay_safe")
    def gate(ctx) -> str:
        """Gate."""
        ctx.turn.internal_evaluation(evaluator=evaluator, model="judge", purpose="gate",
                                     questions=[YesNo("ok", "Ok?")], candidate="x")
        return "passed"

    agent = registered(Agent("gated_pg", tools=[gate], client=ScriptedClient(
        [call("gate"), answer("done")])))
    run = agent.submit("go")
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(run.id, kind="test")
    resume_after_crash(run.id)

    run.refresh()
    assert run.status == "completed", run.error
    (receipt,) = load_turn(run.id).evaluation_receipts
    assert [a["status"] for a in receipt["attempts"]] == ["interrupted"]
    assert len(evaluator.requests) == 1 and run.cost is None
    assert results(run.id)[0]["error"] == "EvaluationError"
