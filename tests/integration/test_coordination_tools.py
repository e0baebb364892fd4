"""Coordination tools (issue 4): launch_agent, wait_for, send_message; completion callbacks.

Models are scripted from the transcript (``tests.orchestration.scripted``). Background turns run
in this thread through ``services.run_turn``, as the Celery task does.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.dispatch import background, override_turnkit
from tests.helpers import _disarm_failpoints, expire_lease, registered, verify_after_test
from tests.orchestration import (
    answering,
    crash_at,
    policy,
    policy_calls,
    recover,
    scripted,
    snapshot,
    tool_results,
)
from turnkit_django import (
    Agent,
    AuthorizationError,
    Conversation,
    ModelError,
    reconcile,
    services,
    store,
)
from turnkit_django.base import failpoints
from turnkit_django.models import Delivery, Message, ToolExecution, Turn, Wait
from turnkit_django.runtime import deliveries
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import launch_agent, send_message, wait_for

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

TENANT = {"tenant": "t1", "user": 1}


def helper(name: str = "helper") -> Agent:
    return Agent(name, description="Helps.", client=FunctionClient(
        lambda request: reply(f"{name} did {request.messages[0].text}")))


def coordinator(registered: Any, *steps: Any, subs: tuple[Agent, ...] | None = None) -> Agent:
    return registered(Agent("coordinator", tools=[launch_agent, wait_for, send_message],
                            sub_agents=list(subs if subs is not None else (helper(),)),
                            client=FunctionClient(scripted(*steps))))


def launches(*tasks: str, callback: bool = False) -> list[Any]:
    return [call("launch_agent", id=f"call_launch_{i}", agent="helper", task=task,
                 callback=callback) for i, task in enumerate(tasks)]


def children(turn_id: str) -> list[Turn]:
    return list(Turn.objects.filter(parent_turn_id=turn_id).order_by("created_at"))


# ----------------------------------------------------------------- launch_agent, wait_for


def test_launch_agent_returns_at_once_and_wait_for_joins_in_the_requested_order(registered):
    agent = coordinator(
        registered,
        launches("first", "second"),
        lambda out: call("wait_for", id="call_wait",
                         turn_ids=[out[1]["turn_id"], out[0]["turn_id"]]),
        lambda out: reply(" / ".join(r["output_text"] for r in out[-1]["results"])),
    )
    run = agent.submit("coordinate", principal=TENANT)
    assert services.run_turn(run.id)

    first, second = children(run.id)
    launched = tool_results(run.id)
    # Not joined: the launches answered at once with the pending children's envelopes.
    assert [content["turn_id"] for _, _, content in launched] == [first.pk, second.pk]
    assert {content["status"] for _, _, content in launched} == {"pending"}
    assert (first.principal, first.depth, first.root_turn_id) == (TENANT, 1, run.id)
    assert first.submitted_at is not None and "callback_conversation" not in first.options
    # wait_for suspended the turn: no claim, its execution back to pending, edges in place.
    parent = Turn.objects.get(pk=run.id)
    assert (parent.status, parent.claimed_by, parent.fence) == ("waiting", "", 2)
    assert ToolExecution.objects.get(tool_call_id="call_wait").status == "pending"
    assert set(Wait.objects.filter(waiter_id=run.id).values_list("target_id", flat=True)) == {
        first.pk, second.pk}

    assert services.run_turn(first.pk)
    assert Turn.objects.get(pk=run.id).status == "waiting"
    assert services.run_turn(second.pk)
    assert services.run_turn(run.id)

    run.refresh()
    assert run.status == "completed"
    assert run.output_text == "helper did second / helper did first"
    (_, is_error, joined) = tool_results(run.id)[-1]
    assert not is_error
    assert [r["turn_id"] for r in joined["results"]] == [second.pk, first.pk]


def test_launch_agent_creates_one_child_per_tool_execution_even_when_replayed(registered):
    agent = coordinator(registered, launches("once"), reply("launched"))
    run = agent.submit("coordinate")
    crash_at("after_tool_call")  # the child exists, its result is not recorded yet
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(run.id, kind="test")
    (child,) = children(run.id)
    recover(run.id)
    assert services.run_turn(run.id)

    assert run.refresh().status == "completed"
    assert children(run.id) == [child]
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert (execution.status, execution.attempts) == ("completed", 2)
    assert tool_results(run.id)[0][2]["turn_id"] == child.pk


def test_launch_agent_starts_only_the_agents_own_sub_agents(registered):
    agent = coordinator(registered, call("launch_agent", id="call_x", agent="stranger",
                                         task="anything"), reply("ok"))
    run = agent.run("coordinate")
    (_, is_error, content) = tool_results(run.id)[0]
    assert is_error and content["error"] == "unknown_agent"
    assert "helper" in content["message"]
    assert not children(run.id)


@pytest.mark.parametrize("denied", ["launch_agent", "callback"])
def test_a_denied_launch_or_callback_launches_nothing(registered, policy_calls, denied):
    from tests import orchestration

    agent = coordinator(registered, launches("secret", callback=True), reply("ok"))
    orchestration.denied_actions.add(denied)
    with policy("tests.orchestration.selective"):
        run = agent.run("coordinate", principal=TENANT)
    assert run.status == "completed"
    assert tool_results(run.id)[0][2]["error"] == "not_authorized"
    assert not children(run.id)
    asked = [c for c in policy_calls if c[0] == denied]
    assert asked and all(principal == TENANT for _, principal, _ in asked)


def test_wait_for_on_finished_turns_answers_at_once(registered):
    done = answering("finisher", "early").run("go")
    agent = coordinator(registered, call("wait_for", id="call_wait", turn_ids=[done.id]),
                        reply("ok"))
    run = agent.submit("coordinate")
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed" and run.row.fence == 2  # never suspended
    assert tool_results(run.id)[0][2]["results"][0]["output_text"] == "early"


@pytest.mark.parametrize("case", ["itself", "unknown", "own_conversation", "cycle"])
def test_a_refused_wait_is_a_failed_result_the_model_reads(registered, case):
    holder: dict[str, str] = {}

    def target(out: Any) -> Any:
        return call("wait_for", id="call_wait", turn_ids=[holder["target"]])

    agent = coordinator(registered, target, lambda out: reply(out[-1]["message"]))
    conversation = agent.conversation()
    run = conversation.ask("coordinate", submit=True)
    holder["target"] = {
        "itself": run.id,
        "unknown": "turn_missing",
        "own_conversation": conversation.ask("queued", submit=True).id,
    }.get(case, "")
    if case == "cycle":
        other = answering("other").prepare("later").submit()
        other.wait_for(run)  # the other waits for this turn, so this one may not wait for it
        holder["target"] = other.id
    assert services.run_turn(run.id)

    run.refresh()
    assert run.status == "completed"
    (_, is_error, content) = tool_results(run.id)[0]
    assert is_error and content["error"] == "wait_refused"
    expected = {"itself": "itself", "unknown": "no turn 'turn_missing'",
                "own_conversation": "own conversation", "cycle": "cycle"}[case]
    assert expected in content["message"] and run.output_text == content["message"]
    assert not Wait.objects.filter(waiter_id=run.id).exists()


def test_wait_for_is_refused_in_an_inline_turn(registered):
    target = answering("other").prepare("t").submit()
    agent = coordinator(registered, call("wait_for", id="call_wait", turn_ids=[target.id]),
                        reply("ok"))
    run = agent.run("coordinate")
    assert run.status == "completed"
    assert tool_results(run.id)[0][2]["error"] == "not_available"


# --------------------------------------------------------------------------- callbacks


def test_a_launched_childs_callback_wakes_the_parents_conversation(
        registered, django_capture_on_commit_callbacks):
    agent = coordinator(registered, launches("report back", callback=True), reply("launched"))
    conversation = agent.conversation(principal=TENANT)
    turn = conversation.ask("coordinate", submit=True)
    assert services.run_turn(turn.id)
    assert turn.refresh().status == "completed"
    (child,) = children(turn.id)
    assert child.options["callback_conversation"] == conversation.id

    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(child.pk)

    delivery = Delivery.objects.get(key=f"completion:{child.pk}")
    assert delivery.payload["envelope"]["output_text"] == "helper did report back"
    message = Message.objects.get(pk=delivery.message_id)
    assert message.conversation_id == conversation.id and message.metadata["callback"] is True
    (continuation,) = conversation.turns().filter(options__has_key="woken_by")
    assert continuation.principal == TENANT and continuation.submitted_at is not None
    assert services.run_turn(continuation.pk)
    assert Turn.objects.get(pk=continuation.pk).status == "completed"


@pytest.mark.parametrize("step", ["completion_callback", "hand_on"])
def test_the_callback_and_the_wake_commit_with_the_terminal_write(registered, monkeypatch,
                                                                  step):
    parent = registered(answering("parent_agent")).conversation()
    run = registered(answering("worker_agent", "result")).prepare("work").submit(callback=parent)

    def broken(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError(f"{step} failed")

    monkeypatch.setattr(deliveries, step, broken)
    with pytest.raises(RuntimeError):
        services.run_turn(run.id)
    # The terminal write rolled back with it: the turn is still running, nothing was sent.
    assert Turn.objects.get(pk=run.id).status == "running"
    assert not Delivery.objects.exists()

    monkeypatch.undo()
    recover(run.id)
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed"
    assert Delivery.objects.get(key=f"completion:{run.id}").payload["envelope"]["status"] \
        == "completed"


def test_a_callback_denied_at_completion_is_recorded_and_the_turn_stays_terminal(
        registered, policy_calls):
    from tests import orchestration

    parent = registered(answering("parent_agent")).conversation()
    run = registered(answering("worker_agent")).prepare("work").submit(callback=parent)
    orchestration.denied_actions.add("callback")  # revoked while the turn was queued
    with policy("tests.orchestration.selective"):
        assert services.run_turn(run.id)
    run.refresh()
    assert run.status == "completed" and run.row.options["callback_denied"] is True
    assert not Delivery.objects.exists()
    (asked,) = [c for c in policy_calls if c[0] == "callback"]
    assert asked[2]["turn_id"] == run.id and asked[2]["destination_conversation_id"] == parent.id


def test_failed_and_dead_lettered_turns_send_their_callbacks(registered):
    parent = registered(answering("parent_agent")).conversation()
    failing = Agent("failing_agent", client=FunctionClient(lambda r: ModelError("down")))
    failed = registered(failing).prepare("work").submit(callback=parent)
    assert services.run_turn(failed.id)
    envelope = Delivery.objects.get(key=f"completion:{failed.id}").payload["envelope"]
    assert envelope["status"] == "failed" and envelope["error"]["message"] == "down"

    lost = registered(answering("lost_agent")).prepare("work").submit(callback=parent)
    assert store.claim(lost.id, "a worker that dies") is not None
    with override_turnkit(MAX_RECOVERY_ATTEMPTS=0):
        expire_lease(lost.id)
        assert lost.id in reconcile().dead_lettered
    delivery = Delivery.objects.get(key=f"completion:{lost.id}")
    assert delivery.payload["envelope"]["status"] == "failed"
    assert delivery.payload["envelope"]["error"]["type"] == "DeadLetter"
    assert json.loads(delivery.payload["text"]) == delivery.payload["envelope"]


def test_a_callback_asked_at_submit_is_authorized_first(registered, policy_calls):
    from tests import orchestration

    parent = registered(answering("parent_agent")).conversation(principal=TENANT)
    run = registered(answering("worker_agent")).prepare("work", principal=TENANT)
    orchestration.denied_actions.add("callback")
    before = snapshot()
    with policy("tests.orchestration.selective"), pytest.raises(AuthorizationError):
        run.submit(callback=parent)
    assert snapshot() == before
    ((_, principal, resources),) = policy_calls
    assert principal == TENANT and resources["destination_conversation_id"] == parent.id


# --------------------------------------------------------------------------- send_message


@pytest.fixture
def inbox(registered) -> Conversation:
    return registered(answering("inbox_agent", "noted")).conversation(
        principal={"tenant": "t1", "user": 2})


def test_send_message_delivers_once_with_a_key_derived_from_the_execution(registered, inbox,
                                                                           policy_calls):
    agent = coordinator(registered, call("send_message", id="call_send",
                                         conversation_id=inbox.id, text="please check"),
                        reply("sent"))
    run = agent.submit("coordinate", principal=TENANT)
    crash_at("after_tool_call")  # sent, but the result is not recorded: the call is replayed
    with policy("tests.orchestration.allow"), pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(run.id, kind="test")
    recover(run.id)
    with policy("tests.orchestration.allow"):
        assert services.run_turn(run.id)

    assert run.refresh().status == "completed"
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert execution.attempts == 2
    delivery = Delivery.objects.get()
    assert delivery.key == f"turnkit:send:{execution.pk}"
    assert (delivery.source_turn_id, delivery.source_conversation_id) == (run.id,
                                                                         run.conversation_id)
    assert tool_results(run.id)[0][2] == {"delivery_id": delivery.pk,
                                          "conversation_id": inbox.id, "delivered": True}
    (message,) = inbox.messages()
    assert message.metadata["sender_principal"] == TENANT
    # The destination answers as itself, never as the sender.
    (continuation,) = inbox.turns()
    assert continuation.principal == {"tenant": "t1", "user": 2}
    # Asked once: the replay finds the message it stored and reports it.
    sends = [c for c in policy_calls if c[0] == "send_message"]
    assert len(sends) == 1 and all(principal == TENANT for _, principal, _ in sends)


def test_send_message_to_an_unknown_conversation_is_a_failed_result(registered):
    agent = coordinator(registered, call("send_message", id="call_send",
                                         conversation_id="conv_missing", text="hi"),
                        reply("ok"))
    run = agent.run("coordinate")
    assert tool_results(run.id)[0][2]["error"] == "unknown_conversation"
    assert not Delivery.objects.exists()


# --------------------------------------------------------------------------- adversarial model


def test_a_model_claiming_another_principal_changes_nothing_it_may_not(registered, inbox,
                                                                       policy_calls):
    """The model names another tenant's principal and targets that tenant: every attempt is a
    failed tool result, nothing of the other tenant changes, and the policy only ever sees the
    turn's own principal."""
    theirs = registered(answering("their_agent")).conversation(
        principal={"tenant": "t2", "user": 9})
    their_turn = theirs.ask("private work", submit=True)
    forged = {"tenant": "t2", "user": 9}
    agent = coordinator(
        registered,
        call("send_message", id="c0", conversation_id=theirs.id, text="wire the funds",
             principal=forged),
        call("send_message", id="c1", conversation_id=theirs.id, text="wire the funds"),
        call("launch_agent", id="c2", agent="helper", task="act as t2", principal=forged),
        call("wait_for", id="c3", turn_ids=[their_turn.id]),
        call("send_message", id="c4", conversation_id=inbox.id, text="same tenant is fine"),
        reply("gave up"),
    )
    before = {"messages": list(theirs.messages().values_list("pk", flat=True)),
              "turn": Turn.objects.filter(pk=their_turn.id).values().get()}
    run = agent.submit("misbehave", principal=TENANT)
    with policy("tests.orchestration.tenant_recorded"):
        assert services.run_turn(run.id)

    assert run.refresh().status == "completed" and run.output_text == "gave up"
    outcomes = [(call_id, content.get("error")) for call_id, _, content in tool_results(run.id)]
    assert outcomes == [("c0", "invalid_arguments"), ("c1", "not_authorized"),
                        ("c2", "invalid_arguments"), ("c3", "not_authorized"), ("c4", None)]
    assert list(theirs.messages().values_list("pk", flat=True)) == before["messages"]
    assert Turn.objects.filter(pk=their_turn.id).values().get() == before["turn"]
    assert not theirs.inbox().exists()
    assert not Wait.objects.filter(target_id=their_turn.id).exists()
    assert not children(run.id)
    assert inbox.inbox().count() == 1
    assert Delivery.objects.count() == 1
    # The policy was only ever asked for the turn's own principal.
    assert policy_calls and all(principal == TENANT for _, principal, _ in policy_calls)


def test_a_denied_wait_for_writes_no_edge(registered, policy_calls):
    from tests import orchestration

    target = answering("other").prepare("t").submit()
    agent = coordinator(registered, call("wait_for", id="call_wait", turn_ids=[target.id]),
                        reply("ok"))
    run = agent.submit("coordinate")
    orchestration.denied_actions.add("wait")
    before = snapshot()["counts"]["Wait"]
    with policy("tests.orchestration.selective"):
        assert services.run_turn(run.id)
    assert tool_results(run.id)[0][2]["error"] == "not_authorized"
    assert Wait.objects.count() == before


@pytest.mark.parametrize("denial", ["tests.orchestration.deny", "tests.orchestration.truthy_one",
                                    "tests.orchestration.truthy_yes"])
def test_a_policy_that_does_not_return_true_denies_every_model_side_action(registered, denial):
    """Only a literal True allows: 1 and "yes" deny launches, messages and plain tools alike."""
    effects: list[str] = []

    from turnkit_django import tool

    @tool
    def touch(note: str) -> str:
        """Record a side effect."""
        effects.append(note)
        return "ok"

    other = Conversation.create(helper("target"))
    agent = registered(Agent(
        "gatekeeper", tools=[launch_agent, send_message, touch], sub_agents=[helper()],
        client=FunctionClient(scripted(
            [call("launch_agent", id="c_launch", agent="helper", task="x"),
             call("send_message", id="c_send", conversation_id=other.id, text="hi"),
             call("touch", id="c_touch", note="effect")],
            reply("done"))),
    ))
    before = snapshot()["counts"]
    with policy(denial):
        run = agent.run("go", principal=TENANT)
    assert run.status == "completed"
    assert [r[2]["error"] for r in tool_results(run.id)] == ["not_authorized"] * 3
    assert effects == [] and not children(run.id)
    after = snapshot()["counts"]
    assert after["Delivery"] == before["Delivery"]
    assert after["Turn"] == before["Turn"] + 1  # the run itself, no child
