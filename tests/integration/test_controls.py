"""Interactive controls (issue 15): approvals, pause/resume, steering, keyed input, events.

Inline runs execute in the test's process; background turns are dispatched into the in-memory
recorder and run with ``services.run_turn`` (tests/e2e runs them on real Celery workers).
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.utils import timezone

from tests.dispatch import clear, recorded
from tests.orchestration import denied_actions, policy
from turnkit_django import (
    Agent,
    ApprovalError,
    AuthorizationError,
    InputError,
    InvalidTransition,
    KeyConflict,
    ToolContext,
    load_turn,
    pending_approvals,
    services,
    tool,
)
from turnkit_django.api.handles import Run
from turnkit_django.models import Delivery, Event, Message, ToolExecution, Turn
from turnkit_django.services import controls
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

refunds: list[tuple[str, int]] = []


@pytest.fixture(autouse=True)
def _fresh() -> None:
    refunds.clear()


@tool(approval=True)
def issue_refund(ctx: ToolContext, order_id: str, amount_cents: int) -> dict:
    """Refund an order."""
    refunds.append((order_id, amount_cents))
    return {"refunded": amount_cents}


@tool(approval=lambda args, ctx: args.amount_cents > 1000)
def small_refund(order_id: str, amount_cents: int) -> dict:
    """Refund an order; large amounts need a person."""
    refunds.append((order_id, amount_cents))
    return {"refunded": amount_cents}


@tool(approval=True, approval_timeout=60)
def timed_refund(order_id: str, amount_cents: int) -> dict:
    """Refund an order; the request expires."""
    refunds.append((order_id, amount_cents))
    return {"refunded": amount_cents}


def last_result(request: Any) -> Any:
    results = [p for m in request.messages if m.role == "tool" for p in m.tool_results]
    return results[-1] if results else None


def refund_then_report(name: str, amount: int = 500):
    def respond(request):
        result = last_result(request)
        if result is None:
            return call(name, order_id="42", amount_cents=amount)
        if result.is_error:
            return reply(f"not refunded: {result.content['error']}")
        return reply(f"refunded {result.content['refunded']}")
    return respond


def refund_agent(registered, name: str = "refunds", tool_=issue_refund, amount: int = 500):
    return registered(Agent(name, tools=[tool_],
                            client=FunctionClient(refund_then_report(tool_.name, amount))))


# --------------------------------------------------------------------------- approvals


def test_an_approval_gated_refund_runs_only_after_approval_exactly_once(registered):
    agent = refund_agent(registered)
    run = agent.run("refund order 42", principal={"user": 7})

    assert run.status == "paused" and refunds == []
    waiting = pending_approvals(principal={"user": 1})
    assert [e.tool_name for e in waiting] == ["issue_refund"]
    call_id = waiting[0].tool_call_id
    assert waiting[0].arguments == {"order_id": "42", "amount_cents": 500}
    assert Turn.objects.get(pk=run.id).claimed_by == ""  # the claim was released

    run.approve(call_id, principal={"user": 1})
    assert run.status == "completed" and run.output_text == "refunded 500"
    assert refunds == [("42", 500)]
    run.approve(call_id, principal={"user": 1})  # approving twice is a no-op
    assert refunds == [("42", 500)] and run.refresh().status == "completed"
    assert pending_approvals() == []


def test_a_denial_is_a_tool_result_the_model_reads(registered):
    run = refund_agent(registered, "deny-refunds").run("refund order 42")
    call_id = run.pending_approvals()[0].tool_call_id

    run.deny(call_id, reason="over the limit", principal={"user": 1})
    assert refunds == []
    assert run.status == "completed"
    assert run.output_text == "not refunded: approval_denied"
    execution = ToolExecution.objects.get(tool_call_id=call_id)
    assert execution.status == "failed" and execution.approval["reason"] == "over the limit"
    with pytest.raises(ApprovalError):
        run.approve(call_id, principal={"user": 1})  # decided otherwise already


def test_edited_arguments_are_validated_and_run_as_approved(registered):
    run = refund_agent(registered, "edit-refunds").run("refund order 42")
    call_id = run.pending_approvals()[0].tool_call_id

    with pytest.raises(InputError, match="invalid"):
        run.approve(call_id, arguments={"order_id": "42", "amount_cents": "a lot"})
    # Text PostgreSQL cannot store as given is refused, not stored as U+FFFD (issue 35 H9).
    for text in ("4\x002", "4\ud8002"):
        with pytest.raises(InputError, match="edited arguments"):
            run.approve(call_id, arguments={"order_id": text, "amount_cents": 300})
    assert run.refresh().status == "paused" and refunds == []
    # Stored as the tool runs it: "300" for an int is stored as 300.
    run.approve(call_id, arguments={"order_id": "42", "amount_cents": "300"})
    assert refunds == [("42", 300)] and run.output_text == "refunded 300"
    execution = ToolExecution.objects.get(tool_call_id=call_id)
    assert execution.arguments == {"order_id": "42", "amount_cents": 300}
    assert execution.approval["proposed_arguments"] == {"order_id": "42", "amount_cents": 500}


def test_an_approval_callable_decides_per_call(registered):
    small = refund_agent(registered, "small", small_refund, 500).run("refund")
    assert small.status == "completed" and refunds == [("42", 500)]
    large = refund_agent(registered, "large", small_refund, 5000).run("refund")
    assert large.status == "paused" and refunds == [("42", 500)]


def test_approve_and_deny_are_authorized_and_a_refusal_changes_nothing(registered):
    run = refund_agent(registered, "guarded").run("refund")
    call_id = run.pending_approvals()[0].tool_call_id
    denied_actions.update({"approve", "deny"})
    with policy("tests.orchestration.selective"):
        assert pending_approvals(principal={"user": 2}) == []
        with pytest.raises(AuthorizationError):
            run.approve(call_id, principal={"user": 2})
        with pytest.raises(AuthorizationError):
            run.deny(call_id, principal={"user": 2})
    assert run.refresh().status == "paused" and refunds == []
    assert ToolExecution.objects.get(tool_call_id=call_id).approval["state"] == "requested"


def test_a_background_approval_resumes_on_a_worker_and_expiry_is_a_denial(
        registered, django_capture_on_commit_callbacks):
    agent = refund_agent(registered, "timed", timed_refund)
    approved = agent.submit("refund")
    expired = agent.submit("refund")
    for run in (approved, expired):
        assert services.run_turn(run.id)
        assert run.refresh().status == "paused"
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        approved.approve(approved.pending_approvals()[0].tool_call_id)
    assert recorded() == [approved.id]  # dispatched, not run in the caller
    assert services.run_turn(approved.id)
    assert approved.refresh().status == "completed" and refunds == [("42", 500)]

    execution = ToolExecution.objects.get(turn_id=expired.id)
    past = (timezone.now() - timedelta(seconds=1)).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    ToolExecution.objects.filter(pk=execution.pk).update(
        approval={**execution.approval, "expires_at": past})
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        services.drain()
    assert expired.id in recorded()
    assert services.run_turn(expired.id)
    assert expired.refresh().output_text == "not refunded: approval_denied"
    assert ToolExecution.objects.get(pk=execution.pk).approval["state"] == "expired"
    assert refunds == [("42", 500)]


# --------------------------------------------------------------------------- pause / resume


def test_a_paused_turn_is_never_claimed_and_resume_dispatches_it(
        registered, django_capture_on_commit_callbacks):
    agent = registered(Agent("pausable", client=FunctionClient(lambda r: reply("done"))))
    run = agent.submit("go")
    run.pause(principal={"user": 1})
    assert run.status == "paused"
    assert services.run_turn(run.id) is False
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        run.resume(principal={"user": 1})
    assert run.status == "pending" and recorded() == [run.id]
    assert services.run_turn(run.id) and run.refresh().status == "completed"


def test_a_pause_takes_effect_at_the_next_step_boundary_and_resume_continues(registered):
    seen: list[int] = []

    @tool
    def step(ctx: ToolContext, n: int) -> dict:
        """Count."""
        seen.append(n)
        if n == 1:  # the application pauses the run while this call runs
            controls.pause(Turn.objects.get(pk=ctx.turn.id))
        return {"n": n}

    def respond(request):
        done = sum(1 for m in request.messages if m.role == "tool")
        return [call("step", n=1), call("step", n=2)] if done == 0 else reply(f"done {done}")

    agent = registered(Agent("boundary", tools=[step], client=FunctionClient(respond)))
    run = agent.submit("go")
    assert services.run_turn(run.id)
    assert run.refresh().status == "paused" and seen == [1]  # the second call waits
    assert ToolExecution.objects.filter(turn_id=run.id, status="pending").count() == 1
    run.resume()
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed" and run.output_text == "done 2"
    assert seen == [1, 2]


def test_paused_time_does_not_count_toward_the_deadline(registered):
    agent = registered(Agent("deadline", client=FunctionClient(lambda r: reply("done")),
                             timeout=600))
    run = agent.submit("go")
    before = Turn.objects.get(pk=run.id).deadline_at
    run.pause()
    row = Turn.objects.get(pk=run.id)
    hour_ago = (timezone.now() - timedelta(hours=1)).strftime("%Y-%m-%dT%H:%M:%S.%f+00:00")
    Turn.objects.filter(pk=run.id).update(controls={**row.controls, "paused_at": hour_ago})
    run.resume()
    moved = Turn.objects.get(pk=run.id).deadline_at - before
    assert timedelta(minutes=59) < moved < timedelta(minutes=61)


def test_pause_and_resume_are_authorized(registered):
    agent = registered(Agent("pause-policy", client=FunctionClient(lambda r: reply("x"))))
    run = agent.submit("go")
    denied_actions.add("pause")
    with policy("tests.orchestration.selective"), pytest.raises(AuthorizationError):
        run.pause(principal={"user": 2})
    assert run.refresh().status == "pending"


# --------------------------------------------------------------------------- steering


def test_steer_skips_a_superseded_call_and_the_model_sees_the_guidance(registered):
    ran: list[str] = []

    @tool
    def lookup(ctx: ToolContext, order_id: str) -> dict:
        """Look up an order."""
        ran.append(order_id)
        if order_id == "1":
            controls.steer(Turn.objects.get(pk=ctx.turn.id), "Prefer store credit.",
                           key="steer-1", principal={"user": 1})
        return {"order_id": order_id}

    def respond(request):
        if not any(m.role == "tool" for m in request.messages):
            return [call("lookup", order_id="1"), call("lookup", order_id="2")]
        users = [m.text for m in request.messages if m.role == "user"]
        results = [p for m in request.messages if m.role == "tool" for p in m.tool_results]
        return reply(f"{users[-1]} | {results[-1].content['error']}")

    agent = registered(Agent("steered", tools=[lookup], client=FunctionClient(respond)))
    run = agent.run("check orders")
    assert run.status == "completed", run.error
    assert ran == ["1"]
    assert run.output_text == "Prefer store credit. | superseded"
    skipped = ToolExecution.objects.get(turn_id=run.id, arguments={"order_id": "2"})
    assert skipped.status == "cancelled"
    receipt = Turn.objects.get(pk=run.id).controls["steers"][0]
    assert receipt["message_id"] is not None


def test_steering_keys_are_idempotent_per_turn(registered):
    agent = registered(Agent("steer-keys", client=FunctionClient(lambda r: reply("x"))))
    run = agent.submit("go")
    first = run.steer("Be brief.", key="k1", principal={"user": 1})
    assert run.steer("Be brief.", key="k1", principal={"user": 1}) == first
    with pytest.raises(KeyConflict):
        run.steer("Be verbose.", key="k1", principal={"user": 1})
    assert services.run_turn(run.id)
    request_users = [m for m in Message.objects.filter(conversation_id=run.conversation_id,
                                                       role="user")]
    assert [m.metadata.get("steer_key") for m in request_users] == [None, "k1"]
    with pytest.raises(InvalidTransition):
        run.refresh().steer("Too late.", key="k2")
    assert run.steer("Be brief.", key="k1", principal={"user": 1})["id"] == first["id"]


# --------------------------------------------------------------------------- input


def test_post_and_ask_with_a_key_retried_five_times_append_one_message(
        registered, django_capture_on_commit_callbacks):
    agent = registered(Agent("inputs", client=FunctionClient(lambda r: reply("ok"))))
    conv = agent.conversation(principal={"user": 7})
    turns = {conv.ask("Where is it?", key="req-77").id for _ in range(5)}
    assert len(turns) == 1
    assert Message.objects.filter(conversation_id=conv.id, role="user").count() == 1
    assert conv.input_status("req-77").status == "applied"
    with pytest.raises(KeyConflict):
        conv.ask("Something else", key="req-77")

    busy = agent.conversation()
    busy_turn = busy.ask("first", submit=True)
    for _ in range(5):
        busy.post("Also check order 43.", key="msg-9", principal={"user": 7})
    assert Delivery.objects.filter(destination_conversation_id=busy.id).count() == 1
    status = busy.input_status("msg-9")
    assert status.status == "pending"  # buffered: the submitted turn's input is frozen
    clear()
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(busy_turn.id)
    for turn_id in recorded():
        services.run_turn(turn_id)
    status = busy.input_status("msg-9")
    assert status.status == "applied" and status.turn_id != busy_turn.id
    assert Message.objects.filter(conversation_id=busy.id,
                                  content__0__text="Also check order 43.").count() == 1


@pytest.mark.parametrize("submit", [False, True])
def test_ask_with_the_key_of_an_input_said_before_answers_it_without_appending(registered,
                                                                              submit):
    """``say(text, key=...)`` appended the input and ran nothing; ``ask`` with that key
    creates the turn over it (appending nothing), and asking again returns that turn."""
    agent = registered(Agent("said_first", client=FunctionClient(lambda r: reply("ok"))))
    conv = agent.conversation()
    said = conv.say("Where is it?", key="req-1")
    turn = conv.ask("Where is it?", key="req-1", submit=submit)
    assert Message.objects.filter(conversation_id=conv.id, role="user").count() == 1
    assert Turn.objects.get(pk=turn.id).context_sequence == said.sequence
    assert conv.ask("Where is it?", key="req-1", submit=submit).id == turn.id
    assert conv.input_status("req-1").turn_id == turn.id


# --------------------------------------------------------------------------- events


def test_events_are_durable_in_order_and_read_after_a_cursor(registered):
    run = refund_agent(registered, "evented").run("refund")
    requested = [e for e in run.events() if e.type == "approval.requested"]
    assert len(requested) == 1
    cursor = requested[0].id
    run.approve(requested[0].payload["call_id"])
    later = [e.type for e in Run(Turn.objects.get(pk=run.id)).events(after=cursor)]
    assert later[:3] == ["turn.paused", "approval.approved", "turn.resumed"]
    assert later[-1] == "turn.completed"
    assert "message.created" in later
    ids = list(run.events().values_list("id", flat=True))
    assert ids == sorted(ids) and len(set(ids)) == len(ids)


def test_an_approval_without_a_timeout_never_expires(registered):
    run = refund_agent(registered, "patient").run("refund")
    services.drain()
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert execution.approval["state"] == "requested" and "expires_at" not in execution.approval


def test_events_go_with_their_run_when_it_is_pruned(registered):
    run = registered(Agent("pruned", client=FunctionClient(lambda r: reply("x")))).run("go")
    assert Event.objects.filter(root_turn_id=run.id).exists()
    assert services.prune(before=timezone.now() + timedelta(days=1)) == 1
    assert not Event.objects.filter(root_turn_id=run.id).exists()


def test_steering_that_arrives_while_the_output_is_reviewed_is_seen_before_the_publication(
        registered):
    """The publication after an output policy is one fenced step: a steer recorded while the
    policy ran refuses its one statement, and under the lock the turn takes the steering
    instead of publishing the reviewed (now stale) output."""
    steered: list[str] = []

    def review(output: Any) -> None:
        if not steered:  # the application steers while the first output is being reviewed
            steered.append(str(output))
            load_turn(turn_ids[0]).steer("Say it in French.", key="steer-review")
        return None

    def respond(request: Any) -> Any:
        texts = [p.text for m in request.messages if m.role == "user" for p in m.parts
                 if hasattr(p, "text")]
        return reply("bonjour" if "Say it in French." in texts else "hello")

    turn_ids: list[str] = []
    agent = registered(Agent("reviewed-steer", client=FunctionClient(respond),
                             output_policy=review, output_policy_mode="report"))
    run = agent.prepare("greet")
    turn_ids.append(run.id)
    run = run.execute()
    assert run.status == "completed", run.error
    assert steered == ["hello"]
    assert run.output_text == "bonjour"
