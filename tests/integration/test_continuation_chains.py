"""Continuations started by turns share their tree's budget; cancelled trees stay dead
(issue 10, items 2 and 3).

A message a model makes a turn send (the ``send_message`` tool, a launched child's completion
callback) wakes its destination with a continuation that joins the SENDER's tree: the root-wide
budget (iterations, tool executions, spend, the root's deadline) bounds the whole chain, and a
cascade cancel of the tree reaches it. A message from a tree that was cancelled wakes nothing.
The completion callback of a root the application submitted is application input: a new root.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.dispatch import clear, recorded
from tests.orchestration import policy, tenant_policy
from turnkit_django import Agent, services, store
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import launch_agent, send_message, wait_for

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

TENANT = {"tenant": "t1", "user": 1}
assert tenant_policy  # the policy the chains run under (by import path below)


def run_dispatched(capture: Any, rounds: int = 40) -> int:
    """Run every turn dispatched so far, and what those dispatch, like workers would
    (``capture`` is pytest-django's ``django_capture_on_commit_callbacks``)."""
    ran = 0
    for _ in range(rounds):
        pending = recorded()
        clear()
        if not pending:
            return ran
        for turn_id in dict.fromkeys(pending):
            with capture(execute=True):
                ran += services.run_turn(turn_id)
    raise AssertionError(f"still dispatching after {rounds} rounds")


def self_messenger(registered: Any) -> Agent:
    """A model that messages its own conversation every time it runs, then stops."""

    def respond(request: Any) -> Any:
        if request.last_message_is_tool_result():
            return reply("sent")
        conversation_id = request.metadata["conversation_id"]
        return call("send_message", conversation_id=conversation_id, text="again")

    return registered(Agent("narcissus", tools=[send_message], max_iterations=2,
                            client=FunctionClient(respond)))


def test_a_model_messaging_its_own_conversation_is_stopped_by_the_shared_budget(
        registered, django_capture_on_commit_callbacks):
    agent = self_messenger(registered)
    with policy("tests.orchestration.tenant_policy"):
        with django_capture_on_commit_callbacks(execute=True):
            run = agent.submit("start", principal=TENANT)
        run_dispatched(django_capture_on_commit_callbacks)

    turns = list(Turn.objects.filter(conversation_id=run.conversation_id).order_by("created_at"))
    assert len(turns) == 2  # the submitted turn and the one continuation its message woke
    first, continuation = turns
    assert first.status == "completed"
    assert continuation.root_turn_id == run.id and continuation.parent_turn_id is None
    assert continuation.principal == TENANT
    assert continuation.status == "failed"
    assert continuation.error["limit"] == "max_iterations"


def test_a_cascade_cancel_is_not_undone_by_a_childs_callback(
        registered, django_capture_on_commit_callbacks):
    helper = Agent("helper", client=FunctionClient(lambda request: reply("helped")))
    agent = registered(Agent("coordinator2", tools=[launch_agent, wait_for],
                             sub_agents=[helper], client=FunctionClient(_launch_and_wait)))
    conversation = agent.conversation(principal=TENANT)
    turn = conversation.ask("coordinate", submit=True)
    assert services.run_turn(turn.id)
    (child,) = Turn.objects.filter(parent_turn_id=turn.id)
    assert child.status == "pending"
    assert Turn.objects.get(pk=turn.id).status == "waiting"  # the coordinator waits for it

    with django_capture_on_commit_callbacks(execute=True):
        report = services.cancel(turn.id, cascade=True)
    run_dispatched(django_capture_on_commit_callbacks)

    assert child.pk in report.cancelled
    assert Turn.objects.get(pk=child.pk).status == "cancelled"
    # The child's callback was written to the conversation, and woke nothing.
    assert conversation.messages().filter(metadata__callback=True).count() == 1
    assert list(conversation.turns().values_list("pk", flat=True)) == [turn.id]


def _launch_and_wait(request: Any) -> Any:
    """Launch the helper with a callback, then wait for it."""
    if request.last_message_is_tool_result():
        (result,) = request.messages[-1].tool_results
        if result.tool_call_id == "call_launch":
            return call("wait_for", id="call_wait", turn_ids=[result.content["turn_id"]])
        return reply("waited")
    return call("launch_agent", id="call_launch", agent="helper", task="report back",
                callback=True)


def _launch_once(request: Any) -> Any:
    if request.last_message_is_tool_result():
        return reply("launched")
    if any(m.metadata.get("callback") for m in request.messages if m.role == "user"):
        return reply("read the callback")
    return call("launch_agent", id="call_launch", agent="helper", task="report back",
                callback=True)


def test_a_callback_continuation_joins_the_tree_and_a_cascade_cancel_reaches_it(
        registered, django_capture_on_commit_callbacks):
    helper = Agent("helper", client=FunctionClient(lambda request: reply("helped")))
    agent = registered(Agent("coordinator3", tools=[launch_agent], sub_agents=[helper],
                             client=FunctionClient(_launch_once)))
    conversation = agent.conversation(principal=TENANT)
    turn = conversation.ask("coordinate", submit=True)
    assert services.run_turn(turn.id)
    (child,) = Turn.objects.filter(parent_turn_id=turn.id)
    with django_capture_on_commit_callbacks(execute=True):
        assert services.run_turn(child.pk)
    (continuation,) = conversation.turns().filter(options__has_key="woken_by")
    assert continuation.root_turn_id == turn.id  # the callback's sender is in turn's tree
    assert continuation.status == "pending"

    report = services.cancel(turn.id, cascade=True)

    assert continuation.pk in report.cancelled
    assert Turn.objects.get(pk=continuation.pk).status == "cancelled"


def test_an_application_message_still_starts_a_fresh_root(registered):
    agent = registered(Agent("listener", client=FunctionClient(lambda request: reply("ok"))))
    sender, listener = agent.conversation(), agent.conversation(principal=TENANT)
    sender.send_message(listener, "hello from the application", key="app-1", principal=None)
    (continuation,) = listener.turns()
    assert continuation.root_turn_id == continuation.pk
    assert continuation.options["limits"]["max_iterations"] == agent.limits().max_iterations


def _looper(registered: Any) -> Agent:
    return registered(Agent("looper", max_iterations=2,
                            client=FunctionClient(lambda request: call("nothing"))))


def test_an_application_callback_starts_a_fresh_root_with_the_listeners_limits(
        registered, django_capture_on_commit_callbacks):
    """A job that failed on its budget can still be answered: the callback's continuation is a
    new root, not a turn of the job's exhausted tree (docs/howto/messages-and-waits.md)."""
    listener = registered(Agent("listener", max_iterations=4, client=FunctionClient(
        lambda request: reply("noted the failure"))))
    conversation = listener.conversation(principal=TENANT)
    with django_capture_on_commit_callbacks(execute=True):
        run = _looper(registered).submit("loop", callback=conversation, principal=TENANT)
    run_dispatched(django_capture_on_commit_callbacks)

    assert Turn.objects.get(pk=run.id).error["reason"] == "maximum iterations reached"
    (continuation,) = conversation.turns()
    assert (continuation.status, continuation.output_text) == ("completed", "noted the failure")
    assert continuation.root_turn_id == continuation.pk
    assert continuation.options["limits"]["max_iterations"] == 4


def test_an_application_callback_of_a_cancelled_job_still_wakes_its_listener(
        registered, django_capture_on_commit_callbacks):
    listener = registered(Agent("listener", client=FunctionClient(
        lambda request: reply("noted the cancel"))))
    conversation = listener.conversation(principal=TENANT)
    run = _looper(registered).submit("loop", callback=conversation, principal=TENANT)
    with django_capture_on_commit_callbacks(execute=True):
        services.cancel(run.id, cascade=True, principal=TENANT)
    run_dispatched(django_capture_on_commit_callbacks)

    (continuation,) = conversation.turns()
    assert (continuation.status, continuation.root_turn_id) == ("completed", continuation.pk)


def test_deliveries_from_two_trees_wake_one_continuation_in_the_oldest_senders_tree(
        registered, django_capture_on_commit_callbacks):
    """Messages two trees' turns sent to a busy conversation are answered together, once it is
    free, by one continuation in the tree of the oldest message: its budget bounds the answer,
    and the younger sender's tree gets no turn there (the docstring of deliveries._trigger)."""
    seen: list[list[str]] = []

    def listen(request: Any) -> Any:
        seen.append([m.text for m in request.messages if m.role == "user"])
        return reply("heard")

    listener = registered(Agent("listener", client=FunctionClient(listen)))
    inbox = listener.conversation()
    holding = inbox.ask("hold", submit=True)
    assert store.claim_turn(holding.id, "a-worker") is not None  # the inbox is busy

    def sender(text: str) -> Agent:
        def respond(request: Any) -> Any:
            if request.last_message_is_tool_result():
                return reply("sent")
            return call("send_message", conversation_id=inbox.id, text=text)
        return registered(Agent(f"sender-{text}", tools=[send_message],
                                client=FunctionClient(respond)))

    first = sender("first").submit("go")
    second = sender("second").submit("go")
    for run in (first, second):
        with django_capture_on_commit_callbacks(execute=True):
            assert services.run_turn(run.id)
    assert inbox.turns().count() == 1  # both messages wait for the busy inbox

    with django_capture_on_commit_callbacks(execute=True):
        services.cancel(holding.id)  # the inbox's turn ends: its lane wakes for the messages
    run_dispatched(django_capture_on_commit_callbacks)

    (_held, continuation) = inbox.turns().order_by("created_at")
    assert continuation.status == "completed"
    assert continuation.root_turn_id == first.id  # the oldest message's tree
    assert not Turn.objects.filter(root_turn_id=second.id, conversation_id=inbox.id).exists()
    assert seen[-1][-2:] == ["first", "second"]  # one answer to both


def test_an_application_message_naming_its_source_turn_still_starts_a_fresh_root(registered):
    """``conv.send_message(..., source_turn=...)`` records which turn the application sends for;
    it is still application input (messages-and-waits.md, "Which budget"): a new root with the
    destination's limits, not a turn of the named turn's tree, which may be exhausted or
    cancelled."""
    job = registered(Agent("job", client=FunctionClient(lambda request: reply("done"))))
    source = job.conversation()
    run = source.ask("work")  # finished
    agent = registered(Agent("listener", client=FunctionClient(lambda request: reply("ok"))))
    listener = agent.conversation(principal=TENANT)
    source.send_message(listener, "the job is done", key="app-2", principal=None,
                        source_turn=run)
    (continuation,) = listener.turns()
    assert continuation.root_turn_id == continuation.pk
    assert continuation.options["limits"]["max_iterations"] == agent.limits().max_iterations



def test_waking_a_continuation_into_a_tree_takes_no_tree_lock_after_the_conversation_lock(
        registered, django_capture_on_commit_callbacks):
    """Lock order is tree, then conversation. When a busy conversation's turn ends with a
    message from another tree buffered, its terminal transaction holds the conversation lock and
    wakes a continuation joining the sender's tree: submitting it locked that tree's root row,
    the reverse order (a worker of that tree delivering to the conversation deadlocks with it).
    The continuation is created submitted instead, in the same write."""
    listener = registered(Agent("listener", client=FunctionClient(lambda r: reply("heard"))))
    with policy("tests.orchestration.tenant_policy"):
        busy = listener.submit("first", principal=TENANT)  # pending: the conversation is busy

        def respond(request: Any) -> Any:
            if request.last_message_is_tool_result():
                return reply("sent")
            return call("send_message", conversation_id=busy.conversation_id, text="psst")

        sender = registered(Agent("sender", tools=[send_message],
                                  client=FunctionClient(respond)))
        with django_capture_on_commit_callbacks(execute=True):
            run = sender.submit("go", principal=TENANT)
            assert services.run_turn(run.id)  # its message is buffered behind the busy turn
        clear()
        with CaptureQueriesContext(connection) as queries, \
                django_capture_on_commit_callbacks(execute=True):
            assert services.run_turn(busy.id)

    (continuation,) = Turn.objects.filter(conversation_id=busy.conversation_id).exclude(
        pk=busy.id)
    assert continuation.root_turn_id == run.id and continuation.submitted_at is not None
    assert continuation.pk in recorded()  # its doorbell rang
    sql = [q["sql"] for q in queries.captured_queries]
    conversation_lock = max(i for i, s in enumerate(sql) if "FOR NO KEY UPDATE" in s
                            and 'FROM "turnkit_conversation"' in s)
    turn_locks_after = [s for s in sql[conversation_lock:] if "FOR NO KEY UPDATE" in s
                        and 'FROM "turnkit_turn"' in s]
    assert turn_locks_after == [], turn_locks_after
