"""Background writes that take no lock first (issue 11): the submit, the claim, the hand-off.

On PostgreSQL a root turn's submit is one guarded update, its claim a read and an update that
holds only if the row is still the version read (``xmin``), and a background turn's terminal
write locks the tree by its own statement. These tests change the row between the decision and
the write and check that the write did not hold, that the decision was made again under the
lock, and that the outcome is the one the lock would have given.
"""

from __future__ import annotations

import threading
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection, connections
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from tests.dispatch import background, clear, recorded
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from turnkit_django import Agent, services, store
from turnkit_django.messages import TextPart
from turnkit_django.models import Lease, Turn
from turnkit_django.services import turns as service_turns
from turnkit_django.testing import FunctionClient, reply

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background"),
              pytest.mark.skipif("connection.vendor != 'postgresql'")]


def agent_named(name: str, **options: Any) -> Agent:
    return Agent(name, client=FunctionClient(lambda request: reply("done")), **options)


def statements(queries: CaptureQueriesContext) -> list[str]:
    return [q["sql"].split(None, 1)[0] for q in queries.captured_queries]


class Prepare:
    """A claim's ``prepare``: runs ``meanwhile`` at its first decision (between the claim's read
    and its write), and records the ledger each decision saw."""

    def __init__(self, meanwhile: Any = None) -> None:
        self.meanwhile = meanwhile
        self.seen: list[int] = []

    def __call__(self, turn: Turn, ledger: store.Ledger) -> tuple[None, store.LedgerDelta]:
        self.seen.append(ledger.iterations)
        if len(self.seen) == 1 and self.meanwhile is not None:
            self.meanwhile(turn)
        return None, store.LedgerDelta(iterations=1)


# --------------------------------------------------------------------------- submit


def test_a_root_is_submitted_with_one_statement_and_a_deadline_from_the_database_clock():
    run = agent_named("uw-submit", timeout=60).prepare("go")
    with CaptureQueriesContext(connection) as queries:
        submitted = run.submit()
    assert statements(queries) == ["UPDATE"]
    row = Turn.objects.get(pk=run.id)
    assert (row.status, submitted.status) == ("pending", "pending")
    assert row.submitted_at is not None and row.submitted_at == row.updated_at
    assert row.deadline_at == row.submitted_at + timedelta(seconds=60)


def test_a_second_submit_writes_nothing():
    run = agent_named("uw-twice").prepare("go")
    run.submit()
    first = Turn.objects.get(pk=run.id)
    with CaptureQueriesContext(connection) as queries:
        run.submit()
    assert "UPDATE" in statements(queries)  # tried, matched nothing, then read under the lock
    again = Turn.objects.get(pk=run.id)
    assert (again.submitted_at, again.updated_at) == (first.submitted_at, first.updated_at)


def test_options_changed_since_the_caller_read_them_are_submitted_under_the_lock():
    run = agent_named("uw-options").prepare("go")
    row = Turn.objects.get(pk=run.id)
    limits = {**row.options["limits"], "timeout": 30}
    Turn.objects.filter(pk=run.id).update(options={**row.options, "limits": limits})
    submitted, new = store.turns.submit(row)  # the caller's row still has no lifetime
    assert new
    assert submitted.deadline_at == submitted.submitted_at + timedelta(seconds=30)


def test_a_turn_with_a_wait_is_submitted_waiting_under_the_lock():
    target = agent_named("uw-target").prepare("task").submit()
    waiter = agent_named("uw-waiter").prepare("combine").wait_for(target).submit()
    assert waiter.status == "waiting"


# --------------------------------------------------------------------------- claim


def test_a_root_is_claimed_with_a_read_and_a_guarded_write_outside_a_transaction():
    run = agent_named("uw-claim").prepare("go").submit()
    with CaptureQueriesContext(connection) as queries:
        claimed = store.claim_turn(run.id, "worker-a", prepare=Prepare())
    assert claimed is not None
    assert statements(queries) == ["SELECT", "WITH"]
    row = Turn.objects.get(pk=run.id)
    assert (row.status, row.fence, row.claimed_by, row.tree_iterations) == (
        "running", 1, "worker-a", 1)
    assert Lease.objects.get(turn_id=run.id).fence == 1


def test_a_cancel_between_the_read_and_the_write_leaves_the_turn_cancelled():
    run = agent_named("uw-cancel").prepare("go").submit()
    prepare = Prepare(meanwhile=lambda turn: services.cancel(turn))
    assert store.claim_turn(run.id, "worker-a", prepare=prepare) is None
    row = Turn.objects.get(pk=run.id)
    assert row.status == "cancelled" and row.claimed_by == ""
    assert row.tree_iterations == 0  # the reservation decided on the old row was not written
    assert not Lease.objects.filter(turn_id=run.id).exists()
    assert prepare.seen == [0]  # the lock found it cancelled: nothing to decide again


def test_a_ledger_moved_between_the_read_and_the_write_is_decided_again_under_the_lock():
    run = agent_named("uw-ledger").prepare("go").submit()
    prepare = Prepare(meanwhile=lambda turn: Turn.objects.filter(pk=turn.pk).update(
        tree_iterations=F("tree_iterations") + 1))  # another member of the tree reserved
    claimed = store.claim_turn(run.id, "worker-a", prepare=prepare)
    assert claimed is not None
    assert prepare.seen == [0, 1]
    assert Turn.objects.get(pk=run.id).tree_iterations == 2
    assert claimed[2].iterations == 1  # the ledger as the lock read it, before the claim's own


def test_two_claims_of_one_turn_decided_on_the_same_row_give_one_claim():
    run = agent_named("uw-race").prepare("go").submit()
    second: list[Any] = []
    prepare = Prepare(meanwhile=lambda turn: second.append(
        store.claim_turn(turn.pk, "worker-b", prepare=Prepare())))
    first = store.claim_turn(run.id, "worker-a", prepare=prepare)
    assert second[0] is not None and first is None  # b wrote first; a's write matched nothing
    row = Turn.objects.get(pk=run.id)
    assert (row.fence, row.claimed_by, row.tree_iterations) == (1, "worker-b", 1)
    assert Lease.objects.get(turn_id=run.id).worker == "worker-b"


def test_a_child_is_claimed_with_two_reads_and_a_write_that_locks_its_root_first():
    agent = agent_named("uw-child")
    root = agent.prepare("go").submit()
    child = services.new_turn(agent, [TextPart("side task")], tree=Turn.objects.get(pk=root.id))
    with CaptureQueriesContext(connection) as queries:
        claimed = store.claim_turn(child.pk, "worker-a", prepare=Prepare())
    assert claimed is not None
    # the child, then its root's ledger with the tree's cascade marks (none here)
    assert statements(queries) == ["SELECT", "SELECT", "WITH"]
    assert Turn.objects.get(pk=root.id).tree_iterations == 1  # the root's ledger, with it
    assert Turn.objects.get(pk=child.pk).claimed_by == "worker-a"
    assert claimed[2].iterations == 0  # the ledger the claim was decided on


def test_a_root_ledger_moved_before_a_childs_write_is_decided_again_under_the_lock():
    agent = agent_named("uw-child-ledger")
    root = agent.prepare("go").submit()
    child = services.new_turn(agent, [TextPart("side task")], tree=Turn.objects.get(pk=root.id))
    prepare = Prepare(meanwhile=lambda turn: Turn.objects.filter(pk=turn.root_turn_id).update(
        tree_iterations=F("tree_iterations") + 1))  # a sibling reserved on the root's ledger
    claimed = store.claim_turn(child.pk, "worker-a", prepare=prepare)
    assert claimed is not None
    assert prepare.seen == [0, 1]  # the first write held nothing, the lock decided on 1
    assert Turn.objects.get(pk=root.id).tree_iterations == 2
    row = Turn.objects.get(pk=child.pk)
    assert (row.status, row.fence, row.claimed_by) == ("running", 1, "worker-a")
    assert Lease.objects.get(turn_id=child.pk).fence == 1


def test_a_child_changed_after_its_read_is_decided_again_on_the_row_as_it_is():
    agent = agent_named("uw-child-moved")
    root = agent.prepare("go").submit()
    child = services.new_turn(agent, [TextPart("side task")], tree=Turn.objects.get(pk=root.id))

    def elsewhere(turn: Turn) -> None:  # another process writes the row, not locked yet
        def write() -> None:
            Turn.objects.filter(pk=turn.pk).update(audit={"moved": True})
            connections.close_all()
        thread = threading.Thread(target=write)
        thread.start()
        thread.join()

    prepare = Prepare(meanwhile=elsewhere)
    claimed = store.claim_turn(child.pk, "worker-a", prepare=prepare)
    assert claimed is not None and claimed[1].audit == {"moved": True}
    assert prepare.seen == [0, 0]  # the first write did not hold, nor its reservation
    assert Turn.objects.get(pk=root.id).tree_iterations == 1


# --------------------------------------------------------------------------- hand-off


def test_a_terminal_write_refused_by_its_guard_still_hands_the_lane_on(registered, monkeypatch):
    """The publication's statement is guarded by the ledger the worker last saw; a tree
    member's reservation made just before it refuses it (sent on its own, it wrote nothing),
    and the publication made under the lock rings the next turn of the lane."""
    monkeypatch.setattr(service_turns._Maintenance, "due_at", float("inf"))
    calls: list[str] = []

    def answer(request: Any) -> Any:
        turn_id = calls[0]
        if len(calls) == 1:  # the first turn's only response: its publication follows
            Turn.objects.filter(pk=turn_id).update(
                tree_tool_executions=F("tree_tool_executions") + 1)
        calls.append(turn_id)
        return reply("done")

    agent = registered(Agent("uw-hand-on", client=FunctionClient(answer)))
    conversation = agent.conversation()
    first = conversation.ask("one", submit=True)
    second = conversation.ask("two", submit=True)
    calls.append(first.id)
    clear()
    with CaptureQueriesContext(connection) as queries:
        assert services.run_turn(first.id, kind="test")
    assert first.refresh().status == "completed"
    assert recorded() == [second.id]
    assert statements(queries).count("BEGIN") == 1  # refused alone, then under the lock


def test_a_doorbell_for_a_finished_turn_costs_one_read(registered):
    """A turn rung again after it finished (a re-ring by maintenance, a redelivered task) is
    refused on the read alone: no transition leaves a terminal status."""
    run = registered(agent_named("uw-finished")).prepare("go").submit()
    assert services.run_turn(run.id, kind="test")
    with CaptureQueriesContext(connection) as queries:
        assert store.claim_turn(run.id, "worker-b") is None
    assert statements(queries) == ["SELECT"]


def test_a_turn_behind_another_of_its_lane_is_refused_on_the_read(registered):
    agent = registered(agent_named("uw-lane"))
    conversation = agent.conversation()
    conversation.ask("one", submit=True)
    second = conversation.ask("two", submit=True)
    with CaptureQueriesContext(connection) as queries:
        assert store.claim_turn(second.id, "worker-b") is None
    assert statements(queries) == ["SELECT"]
    assert Turn.objects.get(pk=second.id).status == "pending"


def test_a_caller_naming_the_wrong_root_gets_the_locks_answer():
    agent = agent_named("uw-wrong-root")
    root = agent.prepare("go").submit()
    child = services.new_turn(agent, [TextPart("side task")], tree=Turn.objects.get(pk=root.id))
    assert store.claim_turn(child.pk, "worker-a", root_id=child.pk) is None  # not its root
    assert Turn.objects.get(pk=child.pk).status == "pending"
    with pytest.raises(Turn.DoesNotExist):  # a named root that does not exist, as before
        store.claim_turn("turn_missing", "worker-a", root_id="turn_missing")
