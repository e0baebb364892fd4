"""Steering never reports a call that may have run as "not executed".

A background delegation whose child finished while its parent waited ran: steering the parent
before it joined keeps the child's result (the envelope the join would have recorded).

Steering a turn whose replay-safe call was reset by recovery gives "outcome unknown".

Recovery puts a replay-safe call that was running when its worker died back to ``pending``
(same row, same key) for the resumed turn to run again. It may have taken effect already, so
when steering makes the resumed turn drop it, the model must read "outcome unknown", as a
cancel or a dead-letter of such a call gives (guarantees P5): a "not executed: superseded"
result would invite the model to call the tool again, with a new key, and charge twice.
"""

from __future__ import annotations

import pytest

from tests.unit.test_resume import Ledger, billing_agent, crash, submitted
from turnkit_django import Agent, services
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import ToolExecution, Turn
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]


def respond(request: ModelRequest) -> object:
    results = [p for m in request.messages if m.role == "tool" for p in m.tool_results]
    if not results:
        return call("charge", id="call_charge", amount=5)
    if results[-1].content.get("error") == "superseded":
        return call("charge", id="call_again", amount=5)  # the model believes it never ran
    return reply(f"last result: {results[-1].content.get('error')}")


def test_a_reset_replay_safe_call_superseded_by_steering_is_outcome_unknown(
        registered, valid_transcript):
    ledger = Ledger()
    ledger.crash_after_effect = 1
    agent, _ = billing_agent(registered, ledger, recovery="replay_safe", respond=respond)
    run = submitted(agent)
    assert crash(run.id).recovered == [run.id]
    (reset,) = ToolExecution.objects.filter(turn_id=run.id)
    assert (reset.status, reset.attempts) == ("pending", 1)  # it ran once already

    run.steer("Prefer store credit.", key="steer-1")
    assert services.run_turn(run.id, kind="test")

    run.refresh()
    assert run.status == "completed", run.error
    assert run.output_text == "last result: outcome_unknown"
    reset.refresh_from_db()
    assert reset.status == "interrupted"
    assert reset.error["error"] == "outcome_unknown"
    assert ToolExecution.objects.filter(turn_id=run.id).count() == 1
    assert ledger.keys == [reset.idempotency_key]  # one charge
    valid_transcript(run.conversation_id)


def test_a_delegation_whose_child_finished_keeps_its_result_when_steering_comes_first(
        registered, valid_transcript):
    def parent_respond(request: ModelRequest) -> object:
        results = [p for m in request.messages if m.role == "tool" for p in m.tool_results]
        if not results:
            return call("kid", id="call_kid", task="go")
        guidance = [m.text for m in request.messages if m.role == "user"][-1]
        return reply(f"{guidance} | {results[-1].content.get('output_text')}")

    kid = Agent("kid", client=FunctionClient(lambda r: reply("child did the work")))
    parent = registered(Agent("boss", sub_agents=[kid], client=FunctionClient(parent_respond)))
    run = parent.submit("start")
    assert services.run_turn(run.id)
    assert Turn.objects.get(pk=run.id).status == "waiting"
    run.steer("Prefer blue.", key="steer-1")
    (child,) = Turn.objects.filter(parent_turn_id=run.id)
    assert services.run_turn(child.pk)
    services.drain()  # releases the parent
    assert services.run_turn(run.id)

    run.refresh()
    assert run.status == "completed", run.error
    assert run.output_text == "Prefer blue. | child did the work"
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.status == "completed"
    assert execution.result["turn_id"] == child.pk
    valid_transcript(run.conversation_id)
