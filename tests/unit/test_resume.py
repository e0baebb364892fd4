"""Resume after a crash (issue 2, done-when 4).

A crash is a failpoint (or tool code) raising ``SimulatedCrash``, a BaseException the runtime does
not catch: nothing after the point runs and what was committed stays committed, as when a worker
process dies. Recovery is what a real deployment does: the heartbeat goes stale, ``reconcile()``
revokes the claim and puts the turn back to pending, and ``run_turn`` executes it again.

Tool side effects are counted in a ledger outside our own tables, by idempotency key.
"""

from __future__ import annotations

import json

import pytest

import turnkit_django
from tests.dispatch import override_turnkit
from tests.helpers import expire_lease
from turnkit_django import Agent, services, tool
from turnkit_django.base import failpoints
from turnkit_django.base.error_records import unknown_result
from turnkit_django.base.failpoints import SimulatedCrash
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.models import Message, ToolExecution, Turn
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]

#: Every failpoint of the runtime, in the order one golden turn passes them.
FAILPOINTS = [
    "before_model_call",
    "after_model_commit",
    "after_tool_intent",
    "inside_tool",
    "after_tool_call",
    "after_tool_commit",
    "before_publish",
]

GOLDEN_TRANSCRIPT = [
    ("user", "text"),
    ("assistant", "tool_call"),
    ("tool", "tool_result"),
    ("assistant", "text"),
]


class Ledger:
    """External side effects of the ``charge`` tool, by idempotency key."""

    def __init__(self) -> None:
        self.keys: list[str] = []
        self.crash_after_effect = 0  # how many next calls die after their effect

    def effect(self, key: str) -> None:
        self.keys.append(key)
        if self.crash_after_effect:
            self.crash_after_effect -= 1
            raise SimulatedCrash("worker died inside the tool, after its side effect")


def answer(request: ModelRequest) -> object:
    """The model: charge once, then report the tool result it got (deterministic)."""
    last = request.messages[-1]
    if last.role == "tool":
        result = last.tool_results[0]
        return reply(f"error={result.is_error} {json.dumps(result.content, sort_keys=True)}")
    return call("charge", id="call_charge", amount=5)


def billing_agent(registered, ledger: Ledger, *, recovery: str = "unknown",
                  respond=answer) -> tuple[Agent, FunctionClient]:
    @tool(name="charge", recovery=recovery)
    def charge(ctx, amount: int) -> dict:
        """Charge the customer."""
        ledger.effect(ctx.idempotency_key)
        return {"charged": amount}

    client = FunctionClient(respond)
    return registered(Agent("billing", tools=[charge], client=client)), client


def submitted(agent: Agent, task: str = "charge 5") -> turnkit_django.Run:
    return agent.prepare(task).submit()



def crash(turn_id: str, point: str | None = None) -> services.ReconcileReport:
    """Run the turn until it dies (at ``point`` if given), then reconcile the dead worker."""
    if point is not None:
        failpoints.arm(point)
    with pytest.raises(SimulatedCrash):
        services.run_turn(turn_id, kind="test")
    assert Turn.objects.get(pk=turn_id).status == "running"  # nobody noticed yet
    expire_lease(turn_id)
    return turnkit_django.reconcile()


def row(turn_id: str) -> Turn:
    return Turn.objects.get(pk=turn_id)


def last_tool_result(request: ModelRequest):
    message = request.messages[-1]
    assert message.role == "tool"
    (result,) = message.tool_results
    return result


# --------------------------------------------------------------------------- model phase


def test_crash_after_model_commit_resumes_without_repeating_the_request(registered,
                                                                        valid_transcript):
    ledger = Ledger()
    agent, client = billing_agent(registered, ledger)
    run = submitted(agent)

    failpoints.arm("after_model_commit")
    with pytest.raises(SimulatedCrash):
        services.run_turn(run.id, kind="test")
    dead = row(run.id)
    assert (dead.status, dead.fence, dead.state["phase"]) == ("running", 1, "tools")
    assert len(client.requests) == 1
    assert ledger.keys == []

    expire_lease(run.id)
    report = turnkit_django.reconcile()
    assert report.recovered == [run.id]
    recovered = row(run.id)
    assert (recovered.status, recovered.fence, recovered.recovery_attempts) == ("pending", 2, 1)
    assert recovered.claimed_by == ""

    assert services.run_turn(run.id, kind="test") is True
    run.refresh()
    assert run.status == "completed", run.error
    # One request for the committed response, one after the tool: never the first one again.
    assert len(client.requests) == 2
    # The response committed the call's intent with it (one commit per step), but a tool that
    # is not replay-safe records its start in a statement of its own just before it runs: this
    # one provably never started, so the resumed turn runs it, once (TurnKit scenarios 5, 51).
    assert last_tool_result(client.requests[1]).content == {"charged": 5}
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert ledger.keys == [execution.idempotency_key]
    assert (execution.status, execution.attempts) == ("completed", 1)
    assert valid_transcript(run.conversation_id) == GOLDEN_TRANSCRIPT
    assert run.row.fence == 4  # claim, revoke, claim, publish


@pytest.mark.parametrize("point", ["after_model_commit", "after_tool_intent"])
def test_an_unsafe_call_that_never_started_is_cancelled_as_not_executed(registered, point):
    ledger = Ledger()
    agent, _ = billing_agent(registered, ledger)
    run = agent.prepare("charge 5")  # inline

    failpoints.arm(point)
    with pytest.raises(SimulatedCrash):
        run.execute()
    run.cancel()
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert (execution.status, execution.attempts, ledger.keys) == ("cancelled", 0, [])
    result = Message.objects.get(turn_id=run.id, kind="tool_result")
    assert result.content[0]["content"]["error"] == "not_executed"
    assert result.metadata["interrupted"] is False


def test_an_unsafe_call_that_started_is_still_outcome_unknown(registered):
    ledger = Ledger()
    ledger.crash_after_effect = 1
    agent, client = billing_agent(registered, ledger)
    run = submitted(agent)

    assert crash(run.id).recovered == [run.id]
    assert ToolExecution.objects.get(turn_id=run.id).status == "interrupted"
    assert services.run_turn(run.id, kind="test")
    assert last_tool_result(client.requests[-1]).content == unknown_result()
    assert len(ledger.keys) == 1


def test_crash_during_the_model_call_reissues_the_request_once(registered, valid_transcript):
    ledger = Ledger()
    deaths = [SimulatedCrash("worker died while the provider was answering")]

    def respond(request: ModelRequest) -> object:
        if deaths:
            raise deaths.pop()
        return answer(request)

    agent, client = billing_agent(registered, ledger, respond=respond)
    run = submitted(agent)

    assert crash(run.id).recovered == [run.id]
    assert Message.objects.filter(turn_id=run.id).count() == 0  # no response was recorded
    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    # The interrupted request was issued again, identically, once.
    assert len(client.requests) == 3
    assert client.requests[0].messages == client.requests[1].messages
    assert valid_transcript(run.conversation_id) == GOLDEN_TRANSCRIPT


# --------------------------------------------------------------------------- tools phase


def test_crash_after_tool_commit_does_not_rerun_the_tool(registered, valid_transcript):
    ledger = Ledger()
    agent, client = billing_agent(registered, ledger)
    run = submitted(agent)

    assert crash(run.id, "after_tool_commit").recovered == [run.id]
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.status == "completed"
    assert len(ledger.keys) == 1

    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    assert ledger.keys == [execution.idempotency_key]  # not run again
    assert len(client.requests) == 2
    assert ToolExecution.objects.get(pk=execution.pk).attempts == 1
    assert valid_transcript(run.conversation_id) == GOLDEN_TRANSCRIPT


def test_inline_crash_inside_a_tool_is_reconciled_to_stale_with_outcome_unknown(
        registered, valid_transcript):
    ledger = Ledger()
    agent, client = billing_agent(registered, ledger)
    run = agent.prepare("charge 5")  # inline: never submitted

    failpoints.arm("inside_tool")
    with pytest.raises(SimulatedCrash):
        run.execute()
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.status == "running"
    assert row(run.id).status == "running"

    # Within the lease the turn is presumed alive: reconcile leaves it alone.
    report = turnkit_django.reconcile()
    assert report.stale == [] and row(run.id).status == "running"

    expire_lease(run.id)
    report = turnkit_django.reconcile()
    assert report.stale == [run.id]
    assert report.recovered == []
    stale = row(run.id)
    assert stale.status == "stale"
    assert stale.fence == 2
    assert stale.completed_at is not None
    execution.refresh_from_db()
    assert execution.status == "interrupted"
    assert execution.error == unknown_result()
    result = Message.objects.get(turn_id=run.id, kind="tool_result")
    assert result.tool_execution_id == execution.pk
    assert result.metadata["interrupted"] is True
    (part,) = result.content
    assert part["content"]["error"] == "outcome_unknown"
    assert part["is_error"] is True
    assert valid_transcript(run.conversation_id) == GOLDEN_TRANSCRIPT[:3]
    assert len(client.requests) == 1


def test_crash_inside_a_tool_after_its_effect_is_not_rerun(registered, valid_transcript):
    ledger = Ledger()
    ledger.crash_after_effect = 1
    agent, client = billing_agent(registered, ledger)
    run = submitted(agent)

    assert crash(run.id).recovered == [run.id]
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.status == "interrupted"

    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    assert ledger.keys == [execution.idempotency_key]  # one effect: never run again
    result = last_tool_result(client.requests[-1])
    assert result.is_error is True
    assert result.content == unknown_result()
    assert run.output_text.startswith("error=True")
    assert valid_transcript(run.conversation_id) == GOLDEN_TRANSCRIPT


def test_crash_inside_a_replay_safe_tool_reruns_it_with_the_same_key(registered,
                                                                      valid_transcript):
    ledger = Ledger()
    ledger.crash_after_effect = 1
    agent, client = billing_agent(registered, ledger, recovery="replay_safe")
    run = submitted(agent)

    assert crash(run.id).recovered == [run.id]
    (execution,) = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.status == "pending"  # reset, same row, hence the same key
    assert not Message.objects.filter(turn_id=run.id, kind="tool_result").exists()

    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    assert ledger.keys == [execution.idempotency_key] * 2  # re-run once, one key
    execution.refresh_from_db()
    assert (execution.status, execution.attempts) == ("completed", 2)
    result = last_tool_result(client.requests[-1])
    assert (result.is_error, result.content) == (False, {"charged": 5})
    assert valid_transcript(run.conversation_id) == GOLDEN_TRANSCRIPT


@pytest.mark.parametrize("point", FAILPOINTS)
def test_a_crash_at_any_point_converges_to_the_fault_free_outcome(point, registered,
                                                                  valid_transcript):
    ledger = Ledger()
    agent, _ = billing_agent(registered, ledger, recovery="replay_safe")
    baseline = submitted(agent)
    assert services.run_turn(baseline.id, kind="test")
    baseline.refresh()
    assert baseline.status == "completed", baseline.error
    effects = len(ledger.keys)

    run = submitted(agent)
    assert crash(run.id, point).recovered == [run.id]
    assert services.run_turn(run.id, kind="test")
    run.refresh()
    assert run.status == "completed", run.error
    assert run.output_text == baseline.output_text
    assert valid_transcript(run.conversation_id) == valid_transcript(baseline.conversation_id)
    assert len(set(ledger.keys[effects:])) == 1  # one effect per key
    assert row(run.id).recovery_attempts == 1


# --------------------------------------------------------------------------- dead letter


def test_a_turn_that_keeps_crashing_is_dead_lettered_with_a_valid_transcript(registered,
                                                                             valid_transcript):
    ledger = Ledger()
    # The model calls the tool whatever it is told; the tool kills its worker every time.
    agent, _ = billing_agent(registered, ledger, respond=lambda request: call("charge", amount=1))
    run = submitted(agent)
    with override_turnkit(MAX_RECOVERY_ATTEMPTS=2):
        reports = [crash(run.id, "inside_tool") for _ in range(3)]

    assert [r.recovered for r in reports] == [[run.id], [run.id], []]
    assert reports[-1].dead_lettered == [run.id]
    dead = row(run.id)
    assert dead.status == "failed"
    assert dead.error["type"] == "DeadLetter"
    assert dead.recovery_attempts == 3
    assert dead.claimed_by == ""
    assert dead.completed_at is not None
    kinds = valid_transcript(run.conversation_id)
    assert kinds == [("user", "text")] + [("assistant", "tool_call"), ("tool", "tool_result")] * 3
    assert set(ToolExecution.objects.filter(turn_id=run.id).values_list("status", flat=True)) == {
        "interrupted"}
    assert ledger.keys == []  # the failpoint fires before the tool body
    assert services.run_turn(run.id, kind="test") is False  # terminal: never claimed again
