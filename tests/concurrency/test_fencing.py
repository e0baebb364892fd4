"""Fencing: a worker whose claim was revoked writes nothing (issue 2, done-when 3b; P6).

A real execution runs in a worker thread and blocks, on an event, inside the model call or inside a
tool. The main thread revokes its claim the way production does (the lease expires and
``reconcile()`` takes the turn over), snapshots every row, then releases the worker: it must hit
``LostClaim`` at its next write and stop, leaving every row as it was.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction
from django.utils import timezone

import turnkit_django
from tests.concurrency.threads import Worker, wait_until
from tests.dispatch import override_turnkit, recorded
from tests.helpers import expire_lease
from turnkit_django import Agent, LostClaim, services, store, tool
from turnkit_django.base.error_records import unknown_result
from turnkit_django.base.states import Phase
from turnkit_django.messages import ToolCallPart, ToolResultPart
from turnkit_django.models import Conversation, Message, ToolExecution, Turn
from turnkit_django.store import repair
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

TIMEOUT = 30


def snapshot() -> dict[str, list[dict[str, Any]]]:
    """Every turnkit row, to prove that nothing changed."""
    return {
        model.__name__: list(model.objects.order_by("pk").values())
        for model in (Conversation, Turn, Message, ToolExecution)
    }


@pytest.fixture
def lost_claims(monkeypatch: pytest.MonkeyPatch) -> list[tuple[str, int | None]]:
    """Record every LostClaim raised through ``Fenced.atomic`` (a spy: the real store runs)."""
    seen: list[tuple[str, int | None]] = []
    real = store.Fenced.atomic

    @contextmanager
    def atomic(self: store.Fenced) -> Iterator[store.Ledger]:
        try:
            with real(self) as ledger:
                yield ledger
        except LostClaim as exc:
            seen.append((exc.turn_id, exc.fence))
            raise

    monkeypatch.setattr(store.Fenced, "atomic", atomic)
    return seen


class Gate:
    """Blocks the code under test until the test releases it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.released = threading.Event()

    def block(self) -> None:
        self.entered.set()
        assert self.released.wait(TIMEOUT), "the test never opened the gate"



def blocked_agent(registered, where: str) -> tuple[Agent, FunctionClient, Gate, list[str]]:
    """An agent that calls ``record`` once and then answers; ``where`` blocks on the gate."""
    gate = Gate()
    effects: list[str] = []

    @tool
    def record(ctx, note: str) -> str:
        """Record a note."""
        effects.append(ctx.idempotency_key)
        if where == "tool" and len(effects) == 1:
            gate.block()
        return f"recorded {note}"

    def respond(request):
        if where == "model" and len(client.requests) == 1:
            gate.block()
        if request.messages[-1].role == "tool":
            return reply("noted")
        return call("record", note="n1")

    client = FunctionClient(respond)
    agent = registered(Agent("fenced", tools=[record], client=client))
    return agent, client, gate, effects


@pytest.mark.parametrize("where", ["model", "tool"])
@pytest.mark.parametrize("mode", ["background", "inline"])
def test_a_revoked_worker_cannot_write_and_rows_stay_unchanged(mode, where, registered,
                                                               lost_claims):
    agent, client, gate, effects = blocked_agent(registered, where)
    with override_turnkit(HEARTBEAT_INTERVAL=3600, LEASE=60):
        run = agent.prepare("take a note")
        if mode == "background":
            run.submit()
            worker = Worker(services.run_turn, run.id, kind="test")
        else:
            worker = Worker(run.execute)
        worker.start()
        try:
            assert gate.entered.wait(TIMEOUT)
            held = Turn.objects.get(pk=run.id)
            assert (held.status, held.fence) == ("running", 1)
            # The worker looks dead (no heartbeat for an hour): reconcile revokes its claim.
            expire_lease(run.id)
            report = turnkit_django.reconcile()
            taken = report.recovered if mode == "background" else report.stale
            assert taken == [run.id]
            dispatched = recorded()
            before = snapshot()
        finally:
            gate.released.set()
        worker.outcome()

    assert snapshot() == before  # not a message, tool result, state or usage change
    assert lost_claims == [(run.id, 1)]  # the worker's next write found the fence moved
    assert len(client.requests) == 1  # and it stopped there
    executions = list(ToolExecution.objects.filter(turn_id=run.id))
    if where == "tool":
        # The late result could not replace the interruption reconcile recorded.
        (execution,) = executions
        assert (execution.status, execution.error, execution.result) == (
            "interrupted", unknown_result(), None)
    else:
        assert executions == []
        assert not Message.objects.filter(turn_id=run.id).exists()

    if mode == "inline":
        assert Turn.objects.get(pk=run.id).status == "stale"
        return
    assert dispatched == [run.id, run.id]  # submit, then recovery: each after its commit
    assert services.run_turn(run.id, kind="test") is True
    run.refresh()
    assert run.status == "completed", run.error
    assert run.row.fence == 4  # claim, revoke, claim, publish
    # A tool whose outcome is unknown is not run again; an unanswered request is asked again.
    assert len(effects) == 1
    assert len(client.requests) == (3 if where == "model" else 2)


def test_a_revoked_worker_cannot_write_over_its_replacement(registered, lost_claims):
    """A replay-safe call re-run by a new worker is ``running`` again, so the status
    compare-and-set would let the old worker's late result through: only the fence stops it."""
    gates = [Gate(), Gate()]
    keys: list[str] = []

    @tool(recovery="replay_safe")
    def record(ctx, note: str) -> str:
        """Record a note."""
        keys.append(ctx.idempotency_key)
        gates[len(keys) - 1].block()
        return f"recorded {note} (attempt {len(keys)})"

    client = FunctionClient(lambda request: reply("noted") if request.messages[-1].role == "tool"
                            else call("record", note="n1"))
    agent = registered(Agent("replayed", tools=[record], client=client))
    with override_turnkit(HEARTBEAT_INTERVAL=3600, LEASE=60):
        run = agent.submit("take a note")
        old = Worker(services.run_turn, run.id, kind="old")
        old.start()
        try:
            assert gates[0].entered.wait(TIMEOUT)
            expire_lease(run.id)
            assert turnkit_django.reconcile().recovered == [run.id]
            new = Worker(services.run_turn, run.id, kind="new")
            new.start()
            assert gates[1].entered.wait(TIMEOUT)
            execution = ToolExecution.objects.get(turn_id=run.id)
            assert (execution.status, execution.attempts) == ("running", 2)
            before = snapshot()
            gates[0].released.set()
            assert old.outcome() is True
            assert snapshot() == before
            assert lost_claims == [(run.id, 1)]
        finally:
            for gate in gates:
                gate.released.set()
        assert new.outcome() is True

    run.refresh()
    assert run.status == "completed", run.error
    assert keys == [execution.idempotency_key] * 2
    (result,) = Message.objects.filter(turn_id=run.id, kind="tool_result")
    assert result.content[0]["content"] == "recorded n1 (attempt 2)"
    assert result.fence == 3
    assert len(client.requests) == 2


# --------------------------------------------------------------------------- the store itself


def claimed_mid_turn(worker: str) -> tuple[store.Claim, ToolExecution]:
    """A claimed turn in its tools phase, written through the fence: two tool calls, the first
    one running."""
    run = Agent("scribe", client=FunctionClient(lambda request: reply("unused"))).prepare("go")
    claim = store.claim(run.id, worker)
    assert claim is not None
    fenced = store.Fenced(claim)
    with fenced.atomic():
        fenced.append("assistant", [ToolCallPart("call_1", "lookup", {}),
                                    ToolCallPart("call_2", "lookup", {})], kind="tool_call")
        execution = fenced.open_execution(ToolCallPart("call_1", "lookup", {}), "running")
        fenced.record(store.TurnState(phase=Phase.TOOLS))
    return claim, execution


def revoke(claim: store.Claim) -> None:
    with transaction.atomic():
        store.lock_tree(claim.root_id)
        store.revoke(Turn.objects.get(pk=claim.turn_id), "requeue", reason="test: revoked")


WRITES: dict[str, Callable[[store.Fenced, ToolExecution], object]] = {
    "append": lambda fenced, execution: fenced.append(
        "tool", [ToolResultPart("call_1", "lookup", "late")], kind="tool_result",
        tool_execution_id=execution.pk),
    "record": lambda fenced, execution: fenced.record(
        store.TurnState(phase=Phase.TOOLS, iterations=7)),
    "open_execution": lambda fenced, execution: fenced.open_execution(
        ToolCallPart("call_2", "lookup", {}), "running"),
    "move_execution": lambda fenced, execution: fenced.move_execution(
        execution.pk, ["running"], "completed", result="late"),
}


@pytest.mark.parametrize("write", sorted(WRITES))
@pytest.mark.parametrize("after", ["revoked", "reclaimed"])
def test_fenced_writes_after_a_revocation_raise_lost_claim_and_write_nothing(write, after):
    claim, execution = claimed_mid_turn("old-worker")
    revoke(claim)
    if after == "reclaimed":
        # Another worker holds the turn now: status is running again, only the fence differs.
        newer = store.claim(claim.turn_id, "new-worker")
        assert newer is not None and newer.fence == claim.fence + 2
    before = snapshot()
    entered = []
    with pytest.raises(LostClaim), store.Fenced(claim).atomic():
        entered.append(True)
        WRITES[write](store.Fenced(claim), execution)
    assert entered == []
    assert snapshot() == before


def test_fenced_writes_succeed_while_the_claim_holds():
    """The control for the test above: the same writes go through with a current claim."""
    claim, execution = claimed_mid_turn("worker")
    fenced = store.Fenced(claim)
    for write in WRITES.values():
        with fenced.atomic():
            write(fenced, execution)
    execution.refresh_from_db()
    assert (execution.status, execution.result, execution.fence) == ("completed", "late", 1)
    turn = Turn.objects.get(pk=claim.turn_id)
    assert turn.state == {"phase": "tools", "iterations": 7}
    assert ToolExecution.objects.filter(turn_id=claim.turn_id).count() == 2
    assert Message.objects.filter(turn_id=claim.turn_id, fence=1).count() == 2
    # End the turn the way a failure does, so the data left behind keeps the invariants.
    with transaction.atomic():
        store.lock_tree(claim.root_id)
        repair(turn, reason="test: done")
        store.revoke(turn, "dead_letter", reason="test: done", completed_at=timezone.now(),
                     error={"type": "Test", "message": "done"})


def test_a_revocation_waits_for_an_in_flight_fenced_write():
    """The tree lock linearises revocation with owned writes: never half before, half after."""
    claim, execution = claimed_mid_turn("worker")
    in_write = Gate()

    def write_under_fence() -> int:
        fenced = store.Fenced(claim)
        with fenced.atomic():
            message = fenced.append("tool", [ToolResultPart("call_1", "lookup", "ok")],
                                    kind="tool_result", tool_execution_id=execution.pk)
            fenced.move_execution(execution.pk, ["running"], "completed", result="ok")
            in_write.block()
        return message.sequence

    writer = Worker(write_under_fence)
    writer.start()
    assert in_write.entered.wait(TIMEOUT)
    revoker = Worker(revoke, claim)
    revoker.start()
    try:
        wait_until(lambda: lock_waiters() >= 1, what="the revocation to wait for the tree lock")
        assert Turn.objects.get(pk=claim.turn_id).fence == claim.fence  # not revoked yet
    finally:
        in_write.released.set()
    sequence = writer.outcome()
    revoker.outcome()

    turn = Turn.objects.get(pk=claim.turn_id)
    assert turn.fence == claim.fence + 1
    (entry,) = turn.fence_log
    assert entry["fence"] == claim.fence
    assert entry["revoked_after_sequence"] >= sequence  # the write landed before the revocation
    with pytest.raises(LostClaim), store.Fenced(claim).atomic():
        pass


def lock_waiters() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity "
            "WHERE datname = current_database() AND wait_event_type = 'Lock'"
        )
        (count,) = cursor.fetchone()
    return int(count)
