"""Structured evaluations (issue 16; TurnKit 0.9.0/0.10.0 ``internal_evaluation``).

``turn.internal_evaluation(...)`` from a tool or an output policy: typed answers; an attempt
persisted as uncertain before the request and committed with usage and cost after; identical
requests reuse the stored receipt without another charge; authorized as ``evaluate``; fenced;
retried only when asked, counting persisted attempts; an attempt a dead worker left is never
replayed. The evaluator is the edge faked here (``ScriptedEvaluator``); the OpenAI-compatible
evaluator's wire is in test_openai_evaluator.py.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

import pytest
from django.db import connection

from tests.dispatch import override_turnkit
from tests.orchestration import recover
from turnkit_django import (
    Agent,
    Choice,
    EvaluationError,
    Score,
    TurnkitError,
    YesNo,
    load_turn,
    services,
    tool,
)
from turnkit_django.base import failpoints
from turnkit_django.clients import EvaluatorReply, Usage
from turnkit_django.events import Event
from turnkit_django.models import Turn
from turnkit_django.testing import ScriptedClient, ScriptedEvaluator, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

JUDGE = "judge-model"
QUESTIONS = [YesNo("safe", "Is the reply free of medical advice?"),
             Choice("tone", "Which tone is it?", ["formal", "casual"]),
             Score("quality", "How good is it?", {"poor": "wrong", "fair": "", "good": "right"})]
ANSWERS = {"safe": {"probability": 0.9},
           "tone": {"distribution": {"formal": 0.8, "casual": 0.2}},
           "quality": {"distribution": {"poor": 0.0, "fair": 0.5, "good": 0.5}}}
USAGE = Usage(input_tokens=1000, output_tokens=100)


@pytest.fixture(autouse=True)
def _priced() -> Any:
    # $1 per million input tokens and $10 per million output tokens: USAGE costs $0.002. The
    # agents' own (scripted) model calls are free, so a turn's cost is known unless said.
    with override_turnkit(COST_RATES={JUDGE: {"input": "1", "output": "10"},
                                      "scripted": {"input": "0", "output": "0"}}):
        yield


def answered(**changes: Any) -> EvaluatorReply:
    return EvaluatorReply(changes.pop("answers", ANSWERS), USAGE, JUDGE, 200, **changes)


class Checker:
    """A replay-safe tool evaluating its ``text`` argument; records what it got back."""

    def __init__(self, evaluator: Any, **options: Any) -> None:
        self.got: list[Any] = []
        checker = self

        @tool(recovery="replay_safe")
        def check_reply(ctx, text: str) -> dict:
            """Check a reply before sending it."""
            evaluation = ctx.turn.internal_evaluation(
                evaluator=evaluator, model=JUDGE, purpose="reply_gate", questions=QUESTIONS,
                candidate=text, policy_version="v1", **options)
            checker.got.append(evaluation)
            return {"safe": evaluation["safe"].probability, "reused": evaluation.reused}

        self.tool = check_reply


def agent(checker: Checker, script: list[Any], **options: Any) -> Agent:
    return Agent("replier", tools=[checker.tool], client=ScriptedClient(script), **options)


def test_typed_answers_come_back_and_the_call_is_charged_to_the_turn(
        django_capture_on_commit_callbacks):
    evaluator = ScriptedEvaluator([answered()])
    checker = Checker(evaluator)
    events: list[Event] = []
    with django_capture_on_commit_callbacks(execute=True):
        run = agent(checker, [call("check_reply", text="Drink water."), reply("sent")]).run(
            "answer", on_event=events.append)

    assert run.status == "completed", run.error
    (evaluation,) = checker.got
    assert evaluation["safe"].probability == 0.9 and evaluation["safe"].yes
    tone = evaluation["tone"]
    assert (tone.choice, tone.distribution) == ("formal", {"formal": 0.8, "casual": 0.2})
    assert 0 < tone.confidence < 1
    quality = evaluation["quality"]
    assert (quality.score, quality.level) == (0.75, "good")  # expected position 1.5 of 0..2
    assert (evaluation.model, evaluation.usage, evaluation.cost) == (JUDGE, USAGE,
                                                                      Decimal("0.002"))
    (request,) = evaluator.requests
    assert (request.model, request.purpose, request.candidate, request.policy_version) == (
        JUDGE, "reply_gate", "Drink water.", "v1")
    # Charged to the turn like any model call: in its usage, cost and the per-model breakdown.
    judge = run.cost_breakdown().by_model[JUDGE]
    assert (judge.calls, judge.usage, judge.cost) == (1, USAGE, Decimal("0.002"))
    assert run.usage.input_tokens >= 1000
    kinds = [e.type for e in events if e.type.startswith("evaluation.")]
    assert kinds == ["evaluation.requested", "evaluation.completed"]
    (receipt,) = load_turn(run.id).evaluation_receipts
    assert receipt["status"] == "completed" and receipt["attempts"][0]["status"] == "completed"


@pytest.mark.django_db(transaction=True)
def test_the_attempt_is_persisted_as_uncertain_before_the_request_with_no_transaction_open():
    seen: list[Any] = []

    def look(request: Any) -> Any:
        turn = Turn.objects.get(pk=request.metadata["turn_id"])
        (receipt,) = turn.state["evaluations"].values()
        seen.append((receipt["status"], receipt["attempts"], connection.in_atomic_block))
        return answered()

    checker = Checker(ScriptedEvaluator([look]))
    run = agent(checker, [call("check_reply", text="hi"), reply("sent")]).run("answer")

    assert run.status == "completed", run.error
    ((status, attempts, in_transaction),) = seen
    assert status == "in_progress" and not in_transaction
    assert [(a["n"], a["status"], "finished_at" in a) for a in attempts] == [
        (1, "uncertain", False)]


def test_an_identical_request_reuses_the_receipt_without_another_charge():
    evaluator = ScriptedEvaluator([answered(), answered()])
    checker = Checker(evaluator)
    script = [call("check_reply", text="same"), call("check_reply", text="same"),
              call("check_reply", text="other"), reply("sent")]
    run = agent(checker, script).run("answer")

    assert run.status == "completed", run.error
    assert [e.reused for e in checker.got] == [False, True, False]
    assert len(evaluator.requests) == 2
    assert run.cost_breakdown().by_model[JUDGE].calls == 2
    assert checker.got[1].receipt_id == checker.got[0].receipt_id != checker.got[2].receipt_id


def test_evaluate_is_authorized_before_the_attempt_is_written():
    asked: list[dict[str, Any]] = []

    def policy(action: str, principal: Any, **resources: Any) -> bool:
        if action == "evaluate":
            asked.append({"principal": principal, **resources})
            return False
        return True

    evaluator = ScriptedEvaluator([answered()])
    checker = Checker(evaluator)
    with override_turnkit(AUTHORIZATION_POLICY=policy, COST_RATES={}):
        run = agent(checker, [call("check_reply", text="hi"), reply("sent")]).run(
            "answer", principal={"user": 3})

    assert run.status == "completed" and evaluator.requests == []
    (execution,) = run.tool_executions()
    assert execution.error["error"] == "AuthorizationError"
    assert load_turn(run.id).evaluation_receipts == []
    (resources,) = asked
    assert (resources["principal"], resources["evaluator"], resources["model"],
            resources["purpose"], resources["turn_id"]) == (
        {"user": 3}, "scripted-evaluator", JUDGE, "reply_gate", run.id)


def test_a_retryable_failure_is_tried_again_only_when_asked_for():
    busy = EvaluationError("rate limited", status="unavailable", retryable=True, retry_after=1.5,
                           http_status=429)
    once = ScriptedEvaluator([busy])
    run = agent(Checker(once), [call("check_reply", text="hi"), reply("sent")]).run("answer")
    (execution,) = run.tool_executions()
    assert execution.error == {"error": "EvaluationError", "message": "rate limited"}
    assert len(once.requests) == 1 and once.slept == []

    twice = ScriptedEvaluator([busy, answered()])
    checker = Checker(twice, max_attempts=2)
    run = agent(checker, [call("check_reply", text="hi"), reply("sent")]).run("answer")
    assert run.status == "completed" and checker.got[0].attempts == 2
    assert twice.slept == [1.5]  # the provider's Retry-After
    (receipt,) = load_turn(run.id).evaluation_receipts
    assert [(a["status"], a["cost"]) for a in receipt["attempts"]] == [
        ("unavailable", "0"), ("completed", "0.00200000")]
    assert run.cost is not None  # a request the provider never took costs nothing


def test_a_malformed_answer_keeps_its_usage_and_an_uncertain_one_makes_the_cost_unknown():
    bad = answered(answers={"safe": {"probability": 1.7}, "tone": {}, "quality": {}})
    run = agent(Checker(ScriptedEvaluator([bad])), [call("check_reply", text="hi"),
                                                    reply("sent")]).run("answer")
    (execution,) = run.tool_executions()
    assert execution.error["error"] == "EvaluationError"
    assert "malformed" in execution.error["message"]
    assert run.cost_breakdown().by_model[JUDGE].usage == USAGE
    assert run.cost is not None

    lost = EvaluationError("timed out", status="uncertain", retryable=True)
    run = agent(Checker(ScriptedEvaluator([lost])), [call("check_reply", text="hi"),
                                                     reply("sent")]).run("answer")
    assert run.cost is None and run.cost_breakdown().unknown  # it may have been billed


@pytest.mark.usefixtures("background")
@pytest.mark.parametrize("attempts", [1, 2])
def test_an_attempt_a_dead_worker_left_is_never_replayed(registered, attempts):
    def die(request: Any) -> Any:
        raise failpoints.SimulatedCrash("the worker died during the request")

    evaluator = ScriptedEvaluator([die, answered()])
    checker = Checker(evaluator, max_attempts=attempts)
    turn = registered(agent(checker, [call("check_reply", text="hi"), reply("sent")])).submit(
        "answer")
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(turn.id, kind="test")
    recover(turn.id)  # reconcile hands the turn back; the replay-safe tool runs again
    assert services.run_turn(turn.id, kind="test")

    turn.refresh()
    assert turn.status == "completed", turn.error
    (receipt,) = load_turn(turn.id).evaluation_receipts
    statuses = [a["status"] for a in receipt["attempts"]]
    if attempts == 1:
        assert statuses == ["interrupted"] and len(evaluator.requests) == 1
        assert turn.tool_executions().get().error["message"].startswith(
            "evaluation 'reply_gate' used its 1 attempt(s); the last one is interrupted")
    else:
        assert statuses == ["interrupted", "completed"] and len(evaluator.requests) == 2
    assert turn.cost is None  # the interrupted attempt may have been billed


def test_a_cancel_during_the_request_keeps_its_answer_out():
    def cancel_meanwhile(request: Any) -> Any:
        services.cancel(Turn.objects.get(pk=request.metadata["turn_id"]))
        return answered()

    checker = Checker(ScriptedEvaluator([cancel_meanwhile]))
    run = agent(checker, [call("check_reply", text="hi"), reply("sent")]).run("answer")

    assert run.status == "cancelled" and checker.got == []
    (receipt,) = load_turn(run.id).evaluation_receipts
    assert receipt["status"] == "in_progress"
    assert [a["status"] for a in receipt["attempts"]] == ["uncertain"]  # never committed
    assert run.cost_breakdown().by_model.get(JUDGE) is None


def test_an_output_policy_evaluates_the_candidate_and_its_metadata_reaches_the_parent():
    evaluator = ScriptedEvaluator([answered(answers={"safe": ANSWERS["safe"]})])

    def gate(output: Any, turn: Any) -> Any:
        evaluation = turn.internal_evaluation(evaluator=evaluator, model=JUDGE,
                                              purpose="child_gate", questions=QUESTIONS[:1])
        turn.output_metadata = {"safe": evaluation["safe"].probability, "mode": "shadow"}
        return None

    child = Agent("drafter", description="Drafts.", output_policy=gate,
                  client=ScriptedClient([reply("Rest and drink water.")]))
    parent_client = ScriptedClient([call("drafter", task="draft"), reply("done")])
    run = Agent("boss", sub_agents=[child], client=parent_client).run("go")

    assert run.status == "completed", run.error
    assert evaluator.requests[0].candidate == "Rest and drink water."
    (result,) = parent_client.requests[1].messages[-1].tool_results
    assert result.content["output_metadata"] == {"safe": 0.9, "mode": "shadow"}
    assert load_turn(result.content["turn_id"]).output_metadata == {"safe": 0.9,
                                                                    "mode": "shadow"}


def test_output_metadata_describes_the_current_candidate_only():
    @tool
    def assess(ctx) -> str:
        """Assess the draft."""
        ctx.turn.output_metadata = {"checked": True}
        assert ctx.turn.output_metadata == {"checked": True}
        return "ok"

    run = Agent("assessor", tools=[assess],
                client=ScriptedClient([call("assess"), reply("final")])).run("go")
    assert run.status == "completed" and load_turn(run.id).output_metadata is None


def test_only_the_running_turn_can_evaluate_or_set_output_metadata():
    run = Agent("idle", client=ScriptedClient([reply("hi")])).run("go")
    turn = load_turn(run.id)
    with pytest.raises(TurnkitError, match=r"needs turn .* running execution"):
        turn.internal_evaluation(evaluator=ScriptedEvaluator(), model=JUDGE, purpose="x",
                                 questions=QUESTIONS)
    with pytest.raises(TurnkitError, match="running execution"):
        turn.output_metadata = {"x": 1}


@pytest.mark.parametrize(("options", "problem"), [
    ({"max_attempts": 4}, "max_attempts must be 1, 2 or 3"),
    ({"timeout": 0}, "timeout must be a finite positive number"),
    ({"timeout": float("inf")}, "timeout must be a finite positive number"),
    ({"timeout": float("nan")}, "timeout must be a finite positive number"),
    ({"timeout": 10**400}, "timeout must be a finite positive number"),
    ({"questions": []}, "questions must be a non-empty list"),
    ({"questions": [YesNo("a", "x?"), YesNo("a", "y?")]}, "question keys must be distinct"),
    ({"purpose": ""}, "purpose must be a non-empty string"),
    ({"evaluator": object()}, "evaluator must be an Evaluator"),
])
def test_bad_arguments_are_refused_before_anything_is_written(options, problem):
    evaluator = ScriptedEvaluator([answered()])

    @tool
    def check(ctx) -> str:
        """Check."""
        arguments = {"evaluator": evaluator, "model": JUDGE, "purpose": "p",
                     "questions": QUESTIONS, **options}
        ctx.turn.internal_evaluation(**arguments)
        return "ok"

    run = Agent("checker", tools=[check],
                client=ScriptedClient([call("check"), reply("done")])).run("go")
    (execution,) = run.tool_executions()
    assert problem in execution.error["message"] and evaluator.requests == []
    assert load_turn(run.id).evaluation_receipts == []


@pytest.mark.parametrize(("make", "label"), [
    (lambda: Choice("tone", "Which?", {"formal": "Formal.", "casual": 5}), "casual"),
    (lambda: Choice("tone", "Which?", {"formal": None, "casual": "Casual."}), "formal"),
    (lambda: Score("quality", "How good?", {"poor": "Poor.", "good": ["Good."]}), "good"),
])
def test_a_label_description_that_is_not_a_string_is_refused_naming_the_label(make, label):
    """A dict of labels took any value as a description, sent into the request as is."""
    with pytest.raises(ValueError, match=f"the description of {label!r} must be a string"):
        make()
    assert Choice("tone", "Which?", {"formal": "", "casual": "Casual."}).labels == (
        "formal", "casual")


def test_questions_are_checked_when_they_are_made():
    with pytest.raises(ValueError, match="at least two distinct labels"):
        Choice("tone", "Which?", ["formal"])
    with pytest.raises(ValueError, match="lowercase letters"):
        YesNo("Safe!", "Is it?")
    with pytest.raises(ValueError, match="non-empty string"):
        Score("q", "", ["a", "b"])


def test_an_evaluation_is_refused_once_the_spend_is_exhausted():
    evaluator = ScriptedEvaluator([answered()])

    @tool(terminal=True, recovery="replay_safe", budget_completion=True)
    def save(ctx) -> str:
        """Save after a last check."""
        ctx.turn.internal_evaluation(evaluator=evaluator, model=JUDGE, purpose="last",
                                     questions=QUESTIONS[:1])
        return "saved"

    with override_turnkit(COST_RATES={"priced": {"input": "1000000", "output": "0"},
                                      JUDGE: {"input": "1", "output": "1"}}):
        run = Agent("saver", model="priced", max_spend=1, tools=[save], client=ScriptedClient(
            [call("save", usage={"input_tokens": 2, "output_tokens": 0})])).run("go")

    assert evaluator.requests == []
    (execution,) = run.tool_executions()
    assert execution.error["error"] == "BudgetExceeded"
