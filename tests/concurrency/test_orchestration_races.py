"""Orchestration races on PostgreSQL (issue 4, done-when 3).

* two opposite waits created at the same moment: never both committed;
* the same delivery delivered by two workers at once: one message, one continuation;
* a delivery racing a background turn's terminal write: never buffered in an idle lane, even
  when it commits while that write waits for the conversation's row;
* cancel racing a turn's completion: exactly one terminal state wins.

Racers are threads, each with its own connection, released together by a barrier every round.
"""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
from django.db import connection, transaction

from tests.concurrency.threads import TIMEOUT, Race, Worker, wait_until
from tests.orchestration import answering
from turnkit_django import Agent, LostClaim, Run, WaitError, services, store
from turnkit_django.base import failpoints
from turnkit_django.models import Message, Turn, Wait
from turnkit_django.runtime import TurnContext, deliveries
from turnkit_django.runtime.loop import context
from turnkit_django.runtime.output import publish as publish_output
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


def wait(waiter_id: str, target_id: str) -> bool:
    """Add one wait edge; False when it was refused as a cycle."""
    try:
        services.add_wait(Turn.objects.get(pk=waiter_id), [target_id])
    except WaitError as exc:
        assert "cycle" in str(exc)
        return False
    return True


def test_two_opposite_waits_created_at_once_never_both_commit():
    agent = answering("lane")
    with Race(2) as race:
        for round_ in range(300):
            x = Run.create(agent, f"x{round_}").submit()
            y = Run.create(agent, f"y{round_}").submit()
            won = race.round([partial(wait, x.id, y.id), partial(wait, y.id, x.id)])
            assert sorted(won) == [False, True], f"round {round_}: {won}"
            edges = Wait.objects.filter(waiter_id__in=[x.id, y.id])
            assert edges.count() == 1, f"round {round_}"
    assert Wait.objects.count() == 300


def test_the_same_delivery_delivered_by_two_workers_appends_one_message_and_one_continuation(
        registered):
    sender = registered(answering("sender_agent")).conversation()
    inbox = registered(answering("inbox_agent"))
    with Race(2) as race:
        for round_ in range(100):
            destination = inbox.conversation(principal={"owner": round_})
            delivery = deliveries.send_message(sender.row, destination.row, f"note {round_}",
                                               key=f"race-{round_}", principal=None,
                                               deliver_now=False)
            race.round([partial(services.deliver, delivery.pk)] * 2)
            assert Message.objects.filter(conversation_id=destination.id,
                                          metadata__delivery_id=delivery.pk).count() == 1
            (continuation,) = destination.turns()
            assert continuation.principal == {"owner": round_}
            assert continuation.options["woken_by"]["delivery_id"] == delivery.pk


def test_a_delivery_racing_a_turns_end_is_never_left_without_a_turn_to_read_it(registered):
    """The terminal write reads the lane after its one statement without taking the
    conversation lock (it updated the row): a delivery committing around it either finds the
    conversation busy (the terminal read then wakes it) or idle (the delivery wakes it)."""
    sender = registered(answering("race_sender")).conversation()
    inbox = registered(answering("race_inbox"))
    with Race(2) as race:
        for round_ in range(60):
            destination = inbox.conversation()
            turn = destination.ask(f"task {round_}", submit=True)
            delivery = deliveries.send_message(sender.row, destination.row, f"note {round_}",
                                               key=f"end-race-{round_}", principal=None,
                                               deliver_now=False)
            race.round([partial(services.run_turn, turn.id, kind="test"),
                        partial(services.deliver, delivery.pk)])
            assert Turn.objects.get(pk=turn.id).status == "completed", f"round {round_}"
            newest = Turn.objects.filter(conversation_id=destination.id).order_by(
                "-created_at", "-id").first()
            assert newest is not None
            stranded = Message.objects.deliveries_after(destination.id, newest.context_sequence)
            active = Turn.objects.filter(conversation_id=destination.id).active()
            assert active.exists() or not stranded.exists(), f"round {round_}: note stranded"


def test_a_delivery_committing_while_the_terminal_write_waits_for_the_row_wakes_with_it(
        registered):
    """A background turn's terminal write is sent on its own, without its lane's hand-off,
    only while no delivery waits in the lane; the hand-off then reads after the commit.

    Here a delivery holds the conversation's row when that statement starts and commits while
    the statement waits for the row: the statement's snapshot does not see the message, but
    PostgreSQL re-checks the row's newest version, whose ``last_sequence`` moved, so the
    statement writes nothing and the publication is made under the lock, with the wake. The
    worker then dies where the hand-off would read: the delivery still has its turn."""
    sender = registered(answering("held_sender")).conversation()
    held, worker_pid = threading.Event(), []

    def hold(delivery_id: str) -> None:  # deliver, and commit once the terminal write waits
        with transaction.atomic():
            services.deliver(delivery_id)
            held.set()
            with connection.cursor() as cursor:
                def blocked() -> bool:
                    cursor.execute("SELECT %s = ANY(pg_blocking_pids(%s))",
                                   [connection.connection.info.backend_pid, worker_pid[0]])
                    return bool(cursor.fetchone()[0])
                wait_until(blocked, what="the terminal write to wait for the conversation")

    holder: list[Worker] = []

    def answer(request: Any) -> Any:  # the turn's only model call: its publication follows
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            worker_pid.append(cursor.fetchone()[0])
        holder.append(Worker(hold, delivery.pk))
        holder[0].start()
        assert held.wait(TIMEOUT)
        return reply("done")

    destination = registered(Agent("held_inbox", client=FunctionClient(answer))).conversation()
    turn = destination.ask("task", submit=True)
    delivery = deliveries.send_message(sender.row, destination.row, "note", key="held",
                                       principal=None, deliver_now=False)
    failpoints.arm("before_hand_off")  # raises only if the statement committed on its own
    assert services.run_turn(turn.id, kind="test")
    holder[0].outcome()
    assert Turn.objects.get(pk=turn.id).status == "completed"
    (continuation,) = Turn.objects.filter(conversation_id=destination.id).exclude(pk=turn.id)
    assert continuation.options["woken_by"]["delivery_id"] == delivery.pk


def publish(execution: TurnContext) -> str:
    try:
        publish_output(execution, "finished", None)
    except LostClaim:
        return "fenced out"
    return "completed"


def test_cancel_racing_completion_has_exactly_one_winner():
    agent = answering("finisher")
    outcomes: dict[Any, int] = {}
    with Race(2) as race:
        for round_ in range(150):
            run = Run.create(agent, f"task {round_}").submit()
            claim = store.claim(run.id, "racer")
            assert claim is not None
            row = Turn.objects.select_related("conversation").get(pk=run.id)
            execution = context(claim, row, agent, client=agent.resolved_client())
            published, report = race.round([partial(publish, execution),
                                            partial(services.cancel, run.id)])
            final = Turn.objects.get(pk=run.id)
            if published == "completed":
                assert not report.changed and final.status == "completed"
                assert final.output_text == "finished" and final.error is None
            else:
                assert report.changed and final.status == "cancelled"
                assert final.output_text == ""
            assert final.fence == claim.fence + 1  # one terminal write moved the fence once
            outcomes[final.status] = outcomes.get(final.status, 0) + 1
    assert sum(outcomes.values()) == 150
