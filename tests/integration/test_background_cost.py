"""What a background turn pays beyond its steps (issue 11): no maintenance pass of its own.

``run_turn`` (the Celery task's body) used to follow every turn with a lane hand-off query, a
second wake and a whole maintenance pass. The terminal write now commits on its own when no
delivery waits in the lane, and one read after it rings the lane's next turn and finds the
turns that waited for this one (released only if there are any); maintenance runs at most once
per ``RECONCILE_INTERVAL`` per process (and from the beat).
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import Error, connection, connections, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from tests.dispatch import background, clear, recorded
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from turnkit_django import Agent, drain, services, tool
from turnkit_django.base import failpoints
from turnkit_django.base.failpoints import SimulatedCrash
from turnkit_django.models import Event, Turn
from turnkit_django.services import turns as service_turns
from turnkit_django.testing import FunctionClient, call, reply

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

#: Statements of ``run_turn`` for a five-step turn on PostgreSQL, none in a transaction: the
#: claim (2: the row read with its lane's state, the clock and its version; the update with the
#: lease, only if the row is still that version; the read brings the messages the turn sees
#: from its input on, so a turn of a new conversation reads no transcript), four one-statement
#: steps,
#: the terminal write (1: the step's one statement with its message, events and the
#: conversation's row, guarded to hold only while no delivery waits in the lane), and after
#: its commit one read of the lane's next turn, its buffered deliveries and the turn's waiters;
#: plus the start of each of the two calls of a tool that is not replay-safe (one UPDATE each,
#: just before the tool runs, so a call whose worker died before it never ran).
RUN_TURN_STATEMENTS = 8 + 2
#: Statements of ``agent.prepare(task).submit()``: the conversation, input, turn and event in
#: one statement; then the submit, one guarded update.
SUBMIT_STATEMENTS = 2


@tool
def probe(n: int) -> dict[str, int]:
    """Return its input."""
    return {"n": n}


def five_steps(request: Any) -> Any:
    done = sum(1 for m in request.messages if m.role == "tool")
    return call("probe", n=done) if done < 2 else reply("done")


@pytest.fixture
def agent(registered) -> Agent:
    return registered(Agent("bg_cost", tools=[probe], client=FunctionClient(five_steps)))


def run_counted(turn_id: str) -> list[str]:
    with CaptureQueriesContext(connection) as queries:
        assert services.run_turn(turn_id, kind="test")
    return [q["sql"] for q in queries.captured_queries]


def test_a_background_turn_runs_no_maintenance_pass_when_one_ran_recently(agent, monkeypatch):
    monkeypatch.setattr(service_turns._Maintenance, "due_at", 0.0)
    first = run_counted(agent.prepare("one").submit().id)
    with CaptureQueriesContext(connection) as submitted:
        run = agent.prepare("two").submit()
    second = run_counted(run.id)

    def maintenance(sql: list[str]) -> list[str]:
        return [s for s in sql if '"turnkit_delivery"' in s and "delivered_at" in s]

    assert maintenance(first), "the first turn of a process runs the pass"
    assert maintenance(second) == []
    if connection.vendor == "postgresql":
        assert len(second) == RUN_TURN_STATEMENTS, "\n".join(s[:120] for s in second)
        assert not [s for s in second if s.startswith('SELECT "turnkit_message"')], second
        # Nobody reads the turn's row after a background turn: its terminal write returns none.
        assert not [s for s in second if "LEFT JOIN t ON true" in s], second
        assert len(submitted) == SUBMIT_STATEMENTS, "\n".join(
            q["sql"][:120] for q in submitted.captured_queries)


def test_the_pass_runs_again_once_the_interval_has_passed(agent, monkeypatch):
    monkeypatch.setattr(service_turns._Maintenance, "due_at", 0.0)
    run_counted(agent.prepare("one").submit().id)
    monkeypatch.setattr(service_turns._Maintenance, "due_at", 0.0)  # as if the interval passed
    sql = run_counted(agent.prepare("two").submit().id)
    assert any('"turnkit_delivery"' in s for s in sql)


def test_a_finished_target_releases_its_waiter_without_a_maintenance_pass(registered,
                                                                          monkeypatch):
    worker = registered(Agent("bg_target", client=FunctionClient(lambda r: reply("result"))))
    joiner = registered(Agent("bg_waiter", client=FunctionClient(lambda r: reply("joined"))))
    target = worker.prepare("task").submit()
    waiter = joiner.prepare("combine").wait_for(target).submit()
    assert waiter.status == "waiting"

    monkeypatch.setattr(service_turns, "drain", lambda: pytest.fail("no pass was due"))
    monkeypatch.setattr(service_turns._Maintenance, "due_at", float("inf"))
    assert services.run_turn(target.id, kind="test")
    assert waiter.refresh().status == "pending"
    assert services.run_turn(waiter.id, kind="test")
    assert waiter.refresh().status == "completed"


def test_the_next_turn_in_the_lane_is_rung_by_the_terminal_write(agent, monkeypatch):
    monkeypatch.setattr(service_turns._Maintenance, "due_at", float("inf"))
    conversation = agent.conversation()
    first = conversation.ask("one", submit=True)
    second = conversation.ask("two", submit=True)
    clear()
    assert services.run_turn(first.id, kind="test")
    assert recorded() == [second.id]


def test_a_worker_dying_between_its_terminal_commit_and_the_hand_off_leaves_the_lane_to_maintenance(
        agent, monkeypatch):
    """The hand-off of a terminal write that committed on its own reads after the commit. A
    worker that dies in between has rung nothing (as when a doorbell sent after a commit is
    lost): the next turn of the lane stays pending, and maintenance rings it."""
    monkeypatch.setattr(service_turns._Maintenance, "due_at", float("inf"))
    conversation = agent.conversation()
    first = conversation.ask("one", submit=True)
    second = conversation.ask("two", submit=True)
    clear()
    failpoints.arm("before_hand_off")
    with pytest.raises(SimulatedCrash):
        services.run_turn(first.id, kind="test")
    assert first.refresh().status == "completed"
    assert recorded() == []
    Turn.objects.filter(pk=second.id).update(updated_at=timezone.now() - timedelta(hours=1))
    assert drain() == [second.id]
    assert recorded() == [second.id]


def test_a_hand_off_read_that_fails_after_the_commit_is_logged_and_the_turn_stays_completed(
        agent, monkeypatch, caplog):
    """The read after a terminal write that committed on its own cannot undo that write. When
    it fails (here the database ends the worker's session just before it), the worker logs it
    and leaves the lane to maintenance; the next statement fails as on any ended session."""
    monkeypatch.setattr(service_turns._Maintenance, "due_at", float("inf"))
    conversation = agent.conversation()
    first = conversation.ask("one", submit=True)
    conversation.ask("two", submit=True)
    clear()

    def end_session() -> None:
        pid = connection.connection.info.backend_pid

        def terminate() -> None:
            with connections["default"].cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
            connections.close_all()
        thread = threading.Thread(target=terminate)
        thread.start()
        thread.join()

    failpoints.arm("before_hand_off", end_session)
    with caplog.at_level(logging.WARNING, logger="turnkit_django.deliveries"), \
            pytest.raises(Error):
        services.run_turn(first.id, kind="test")
    connection.close()
    assert any("could not hand on the lane" in r.getMessage() for r in caplog.records)
    assert first.refresh().status == "completed"
    assert recorded() == []


#: Statements of ``agent.submit(task)`` and of ``conversation.ask(text, submit=True)`` on
#: PostgreSQL: the conversation when it is new, the input, the turn already submitted (its
#: times from the database's clock) and the input's event, in one statement.
CREATED_SUBMITTED_STATEMENTS = 1


@pytest.mark.parametrize("how", ["agent.submit", "ask(submit=True)"])
def test_a_turn_handed_to_the_background_as_it_is_created_is_one_write(agent, how):
    conversation = agent.conversation()
    clear()
    with CaptureQueriesContext(connection) as queries:
        handle = (agent.submit("task") if how == "agent.submit"
                  else conversation.ask("task", submit=True))
    row = Turn.objects.get(pk=handle.id)
    assert row.status == "pending" and row.submitted_at is not None
    assert row.updated_at == row.submitted_at
    assert row.deadline_at == row.submitted_at + timedelta(seconds=300)  # the default timeout
    held = handle.row
    assert (held.status, held.submitted_at, held.deadline_at, held.context_sequence) == (
        row.status, row.submitted_at, row.deadline_at, row.context_sequence)
    assert recorded() == [handle.id]
    created = Event.objects.filter(root_turn_id=handle.id, type="message.created")
    assert [e.payload["text"] for e in created] == ["task"]  # the tree's stream shows its input
    if connection.vendor == "postgresql":
        assert len(queries) == CREATED_SUBMITTED_STATEMENTS, "\n".join(
            q["sql"][:120] for q in queries.captured_queries)
    assert services.run_turn(handle.id, kind="test")
    assert Turn.objects.get(pk=handle.id).status == "completed"


def test_a_turn_created_submitted_in_a_transaction_rolled_back_rings_nothing(agent):
    conversation = agent.conversation()
    clear()
    created: list[str] = []
    with pytest.raises(RuntimeError), transaction.atomic():
        created.append(agent.submit("task").id)
        created.append(conversation.ask("task", submit=True).id)
        raise RuntimeError("the caller's transaction fails")
    assert not Turn.objects.filter(pk__in=created).exists()
    assert recorded() == []
