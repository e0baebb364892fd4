"""Budget completion (issue 16; TurnKit 0.7.2 ``budget_completion!``): the final save.

A terminal, replay-safe tool marked ``budget_completion=True`` may run its one call from the
response that exhausted the spend limit; every other call of that response is "not executed:
spend limit reached", and no model request follows (no next step, no judge, no evaluation, no
revision). One dollar per input token makes the spend count model calls.
"""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.utils import timezone

from tests.dispatch import override_turnkit
from tests.helpers import crash_and_resume
from turnkit_django import Agent, ConfigurationError, tool
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import Turn
from turnkit_django.store.limits import SPEND, TIMEOUT
from turnkit_django.testing import FunctionClient, ScriptedClient, call

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

PRICED = "priced-model"
ONE, THREE = {"input_tokens": 1, "output_tokens": 0}, {"input_tokens": 3, "output_tokens": 0}
saved: list[str] = []
noted: list[str] = []


@pytest.fixture(autouse=True)
def _priced() -> Any:
    saved.clear()
    noted.clear()
    with override_turnkit(COST_RATES={PRICED: {"input": "1000000", "output": "0"}}):
        yield


@tool(terminal=True, recovery="replay_safe", budget_completion=True)
def save_draft(ctx, text: str) -> dict:
    """Save the draft and end the turn."""
    saved.append(ctx.idempotency_key + ":" + text)
    return {"saved": text}


@tool(terminal=True, recovery="replay_safe", budget_completion=True)
def save_copy(text: str) -> str:
    """Save a copy and end the turn."""
    saved.append("copy:" + text)
    return "copied"


@tool
def note(text: str) -> str:
    """Take a note."""
    noted.append(text)
    return "noted"


def writer(script: list[Any], **options: Any) -> Agent:
    options.setdefault("tools", [save_draft, save_copy, note])
    return Agent("writer", model=PRICED, max_spend=Decimal(2), client=ScriptedClient(script),
                 **options)


def results(run: Any) -> dict[str, tuple[str, Any]]:
    return {e.tool_name: (e.status, e.result if e.status != "failed" else e.error)
            for e in run.tool_executions()}


def test_the_final_save_runs_alone_after_the_response_that_exhausted_the_spend(
        valid_transcript):
    script = [call("note", text="a", usage=ONE),  # $1 of $2
              [call("note", text="b", usage=THREE), call("save_draft", text="final"),
               call("note", text="c")]]  # $4: exhausted
    run = writer(script).run("write")

    assert run.status == "completed", run.error
    assert run.output_text == '{"saved": "final"}'
    assert noted == ["a"] and [s.split(":")[-1] for s in saved] == ["final"]
    by_call = {(e.tool_name, e.arguments.get("text")): e for e in run.tool_executions()}
    assert by_call["note", "b"].result == {"error": "not_executed",
                                           "message": "Not executed: spend limit reached."}
    assert by_call["note", "c"].status == "cancelled"
    assert by_call["save_draft", "final"].status == "completed"
    assert Turn.objects.get(pk=run.id).state["budget_completion_call_id"] == (
        by_call["save_draft", "final"].tool_call_id)
    assert run.cost == Decimal(4)  # the exhausting response is charged: spend is observed
    valid_transcript(run.conversation_id)


@pytest.mark.parametrize("calls", [
    [call("note", text="b", usage=THREE)],                                         # none
    [call("save_draft", text="one", usage=THREE), call("save_copy", text="two")],  # two
])
def test_without_exactly_one_final_save_nothing_runs_and_the_turn_fails(calls):
    run = writer([calls]).run("write")

    assert run.status == "failed"
    assert (run.error["type"], run.error["reason"]) == ("BudgetExceeded", SPEND)
    assert saved == [] and noted == []
    assert {e.status for e in run.tool_executions()} == {"cancelled"}


def test_no_model_request_follows_a_final_save_that_failed():
    @tool(terminal=True, recovery="replay_safe", budget_completion=True)
    def broken_save(text: str) -> str:
        """Save, badly."""
        raise RuntimeError("disk full")

    agent = writer([call("broken_save", text="x", usage=THREE)], tools=[broken_save])
    run = agent.run("write")

    assert run.status == "failed" and run.error["reason"] == SPEND
    assert agent.client.remaining == 0 and len(agent.client.requests) == 1


def test_a_failing_local_policy_fails_the_turn_instead_of_asking_for_a_revision():
    def not_final(output: Any) -> Any:
        return "the draft says 'TODO'" if "TODO" in str(output) else None

    agent = writer([call("save_draft", text="TODO", usage=THREE)], output_policy=not_final,
                   output_retries=2)
    run = agent.run("write")

    assert run.status == "failed" and run.error["type"] == "OutputPolicyViolation"
    assert len(agent.client.requests) == 1  # no revision request was made
    assert [s.split(":")[-1] for s in saved] == ["TODO"]


def test_a_judged_policy_is_not_asked_after_the_spend_is_exhausted(tmp_path):
    policy = tmp_path / "tone.md"
    policy.write_text("Be polite.")
    agent = writer([call("save_draft", text="hi", usage=THREE)], output_policy=str(policy))
    run = agent.run("write")

    assert run.status == "failed" and run.error["reason"] == SPEND
    assert len(agent.client.requests) == 1  # the judge was refused before any request


def test_the_deadline_still_applies_to_the_final_save():
    def late(request: ModelRequest) -> Any:
        # The deadline passes while the model answers with the final save.
        Turn.objects.filter(pk=request.metadata["turn_id"]).update(
            deadline_at=timezone.now() - timedelta(seconds=1))
        return call("save_draft", text="late", usage=THREE)

    agent = writer([])
    agent.client = FunctionClient(late)
    run = agent.run("write")

    assert run.status == "failed" and run.error["reason"] == TIMEOUT and saved == []


@pytest.mark.usefixtures("background")
def test_a_crashed_final_save_runs_again_with_the_same_key_and_nothing_else(registered):
    agent = registered(writer([[call("note", text="b", usage=THREE),
                                call("save_draft", text="final")]]))
    run = agent.submit("write")
    crash_and_resume(run.id, "inside_tool")

    run.refresh()
    assert run.status == "completed", run.error
    assert len(saved) == 1 and noted == []  # the crash hit before the first save's effect
    execution = run.tool_executions().get(tool_name="save_draft")
    assert execution.attempts == 2 and saved == [f"{execution.idempotency_key}:final"]


@pytest.mark.parametrize("options", [{"terminal": True}, {"recovery": "replay_safe"}, {}])
def test_a_final_save_must_be_terminal_and_replay_safe(options):
    with pytest.raises(ConfigurationError, match="budget_completion=True needs terminal=True"):
        @tool(budget_completion=True, **options)
        def save(text: str) -> str:
            """Save."""
            return text


SPEND_RESULT = {"error": "not_executed", "message": "Not executed: spend limit reached."}


def test_every_call_the_final_save_leaves_out_gets_the_spend_limit_result_whatever_its_place():
    # TurnKit scenario 73: the calls after the save too are left out because the spend limit
    # was reached, not because the turn ended with the save.
    run = writer([[call("note", text="b", usage=THREE), call("save_draft", text="final"),
                   call("note", text="c"), call("note", text="d")]]).run("write")

    assert run.status == "completed", run.error
    left = {e.arguments["text"]: (e.status, e.result) for e in run.tool_executions()
            if e.tool_name != "save_draft"}
    assert left == {"b": ("cancelled", SPEND_RESULT), "c": ("cancelled", SPEND_RESULT),
                    "d": ("cancelled", SPEND_RESULT)}
    assert noted == [] and [s.split(":")[-1] for s in saved] == ["final"]


@pytest.mark.usefixtures("background")
def test_a_resumed_final_save_leaves_the_calls_after_it_out_with_the_spend_limit_result(
        registered):
    agent = registered(writer([[call("save_draft", text="final", usage=THREE),
                                call("note", text="c")]]))
    run = agent.submit("write")
    crash_and_resume(run.id, "inside_tool")

    run.refresh()
    assert run.status == "completed", run.error
    assert run.tool_executions().get(tool_name="note").result == SPEND_RESULT
    assert noted == []
