"""The fast path of a fenced step on PostgreSQL (issue 11): one guarded statement per step.

A step is decided against the ledger the worker last saw and sent as one statement that writes
only if the fence, the status and that ledger still hold. These tests move each of them between
the decision and the statement and check that nothing of the step was written, that the step was
decided again under the tree lock, and that the outcome is the one the lock would have given.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.db.models import F
from django.test.utils import CaptureQueriesContext

from turnkit_django import Agent, BudgetExceeded, LostClaim, services, store, tool
from turnkit_django.base.states import ToolStatus
from turnkit_django.messages import TextPart
from turnkit_django.models import Conversation, Message, ToolExecution, Turn
from turnkit_django.runtime import budget
from turnkit_django.store import steps
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.skipif("connection.vendor != 'postgresql'")]


def claimed(agent: Agent) -> tuple[store.Fenced, Turn]:
    run = agent.prepare("go")
    claim, row, ledger = store.claim_turn(run.id, "test-worker")  # type: ignore[misc]
    return store.Fenced(claim, ledger), row


def rows(turn_id: str) -> dict[str, Any]:
    turn = Turn.objects.get(pk=turn_id)
    return {"state": turn.state, "fence": turn.fence, "iterations": turn.tree_iterations,
            "messages": Message.objects.filter(turn_id=turn_id).count(),
            "last_sequence": Conversation.objects.get(pk=turn.conversation_id).last_sequence,
            "executions": list(ToolExecution.objects.filter(turn_id=turn_id).values_list(
                "status", flat=True))}


class Decisions:
    """A step body that appends a note and reserves an iteration, recording each decision."""

    def __init__(self, fenced: store.Fenced) -> None:
        self.fenced = fenced
        self.seen: list[int] = []

    def __call__(self, ledger: store.Ledger) -> Message:
        self.seen.append(ledger.iterations)
        delta, _ = budget.reserve_next(ledger, None)
        message = self.fenced.append("assistant", [TextPart("note")])
        self.fenced.record(store.TurnState.from_json({"phase": "model"}), delta=delta)
        return message


def test_a_step_is_one_statement_without_a_transaction_around_it():
    fenced, row = claimed(Agent("fast-one", client=ScriptedClient([reply("x")])))
    step = Decisions(fenced)

    with CaptureQueriesContext(connection) as sql:
        message = fenced.step(step)

    assert [q["sql"][:4] for q in sql.captured_queries] == ["WITH"]
    assert step.seen == [0]  # decided once, on the ledger the claim left
    stored = Message.objects.get(pk=message.pk)
    assert stored.sequence == message.sequence == 2  # after the task's input
    assert Turn.objects.get(pk=row.pk).tree_iterations == 1


def test_a_fence_moved_after_the_decision_writes_nothing():
    fenced, row = claimed(Agent("fast-fence", client=ScriptedClient([reply("x")])))
    services.cancel(row)  # another process revokes the claim: the fence moves
    before = rows(row.pk)
    step = Decisions(fenced)

    with pytest.raises(LostClaim):
        fenced.step(step)

    assert rows(row.pk) == before
    assert len(step.seen) == 1  # the statement refused; the lock then found the fence gone


def test_a_ledger_moved_by_another_tree_member_is_decided_again_under_the_lock():
    agent = Agent("fast-tree", client=ScriptedClient([reply("x")]), max_iterations=3)
    fenced, root = claimed(agent)
    task = services.new_turn(agent, [TextPart("side task")], tree=root)
    other = store.Fenced(*store.claim_turn(task.pk, "other-worker")[::2])  # type: ignore[misc]
    other.step(Decisions(other))  # the task reserves the tree's first iteration

    step = Decisions(fenced)
    fenced.step(step)

    # The first decision saw the ledger the claim left (no iteration yet); the statement
    # refused it, and the decision under the lock saw the task's reservation.
    assert step.seen == [0, 1]
    assert Turn.objects.get(pk=root.pk).tree_iterations == 2
    assert Turn.objects.get(pk=root.pk).state == {"phase": "model"}


@pytest.mark.corrupts_data  # an execution answering no call: the statement is tested alone
def test_a_compare_and_set_that_fails_rolls_the_whole_statement_back():
    fenced, row = claimed(Agent("fast-cas", client=ScriptedClient([reply("x")])))
    execution = ToolExecution.objects.create(turn_id=row.pk, tool_call_id="c1",
                                             tool_name="probe", status=ToolStatus.COMPLETED)
    before = rows(row.pk)
    writes = steps.StepWrites(turn={"state": {"phase": "model", "iterations": 9}})
    writes.messages = store.transcript.build_messages(row.conversation_id, [
        store.NewMessage("tool", [TextPart("late")], turn_id=row.pk)])
    writes.moves.append(steps.Move(execution.pk, (ToolStatus.RUNNING,),
                                   {"status": ToolStatus.FAILED}))

    assert not steps.send(row.pk, row.root_turn_id, row.conversation_id, fenced.claim.fence,
                          fenced._known, writes)  # type: ignore[arg-type]

    assert rows(row.pk) == before  # the turn's update and the message were rolled back too


def test_a_passed_deadline_sends_the_step_under_the_lock():
    fenced, row = claimed(Agent("fast-deadline", client=ScriptedClient([reply("x")])))
    Turn.objects.filter(pk=row.pk).update(deadline_at=F("started_at"))  # already past
    fenced._known.deadline_at = Turn.objects.get(pk=row.pk).deadline_at  # type: ignore[union-attr]
    writes = steps.StepWrites(turn={"state": {"phase": "model"}})

    assert not steps.send(row.pk, row.root_turn_id, row.conversation_id, fenced.claim.fence,
                          fenced._known, writes)  # type: ignore[arg-type]
    with pytest.raises(BudgetExceeded):
        fenced.step(lambda ledger: budget.check_open(ledger))


@tool
def probe(n: int) -> dict[str, int]:
    """Return its input."""
    return {"n": n}


def five_steps(request):  # type: ignore[no-untyped-def]
    done = sum(1 for m in request.messages if m.role == "tool")
    return call("probe", n=done) if done < 2 else reply("done")


def test_every_step_of_a_turn_is_one_round_trip(registered):
    """The statement budget of a step on PostgreSQL: model → tool → model → tool → model."""
    from tests.stepcost import measure

    agent = registered(Agent("fast-five", tools=[probe], client=FunctionClient(five_steps)))

    def run(on_event):  # type: ignore[no-untyped-def]
        assert agent.run("go", on_event=on_event).status == "completed"

    cost = measure(run)
    steps_ = [s for s in cost.spans if s.kind != "setup"]
    assert [s.kind for s in steps_] == ["model", "tool", "model", "tool", "model"]
    for span in steps_:
        # A tool that is not replay-safe (probe) records its start first, in a statement of
        # its own outside the step, so a call whose worker died before it provably never ran.
        expected = ["UPDA", "WITH"] if span.kind == "tool" else ["WITH"]
        assert [q[:4] for q in span.sql] == expected, span.sql
        assert span.kind != "tool" or '"started_at"' in span.sql[0], span.sql


def fields_of(row: Turn) -> dict[str, Any]:
    return {f.attname: getattr(row, f.attname) for f in Turn._meta.concrete_fields}


def flag_done(output: Any) -> dict[str, str] | None:
    """An output policy that always reports (the audit is written with the publication)."""
    return {"rule": "flag_done", "message": "says done"}


@pytest.mark.parametrize("ending", ["completed", "failed", "conversation", "audited"])
def test_an_inline_run_reads_nothing_back_after_its_terminal_write(registered, ending):
    """The terminal statement returns the turn's row: the handle holds what is stored, with no
    read after the run (one statement to create and claim it, one per step; a conversation's
    ask also creates the conversation first)."""
    script = FunctionClient(five_steps)
    limits: dict[str, Any] = {"max_iterations": 1} if ending == "failed" else {}
    if ending == "audited":
        limits = {"output_policy": flag_done, "output_policy_mode": "report"}
    agent = registered(Agent(f"fast-end-{ending}", tools=[probe], client=script, **limits))
    with CaptureQueriesContext(connection) as captured:
        if ending == "conversation":
            handle = agent.conversation().ask("go")
            row = handle.row
        else:
            row = agent.run("go").row
    assert row.status == ("failed" if ending == "failed" else "completed"), row.error
    sent = [q["sql"] for q in captured.captured_queries
            if not q["sql"].upper().startswith(("BEGIN", "COMMIT", "SAVEPOINT", "RELEASE"))]
    if ending != "failed":  # a failure is written under the lock, and the row read again
        # an output policy's publication is a step of its own
        # (+ the start of each of the two calls of probe, which is not replay-safe)
        assert len(sent) == {"completed": 8, "conversation": 9, "audited": 9}[ending], sent
    assert fields_of(row) == fields_of(Turn.objects.get(pk=row.pk))
    assert (row.audit is not None) == (ending == "audited")


class SnapshottingClient(FunctionClient):
    """A client that takes the dynamic context as messages (as the OpenAI client does)."""

    dynamic_context_in_history = True


def test_a_dynamic_context_snapshot_is_one_statement_without_a_transaction(registered):
    """A snapshot written before a model call is a fenced step of its own: one statement."""
    agent = registered(Agent(
        "fast-snapshot", client=SnapshottingClient(lambda request: reply("done")),
        context_contributors=[lambda turn: {"name": "plan", "content": "gold"}]))
    with CaptureQueriesContext(connection) as captured:
        run = agent.run("go")
    assert run.status == "completed", run.error
    sent = [q["sql"] for q in captured.captured_queries]
    assert not [s for s in sent if s.upper().startswith(("BEGIN", "SAVEPOINT"))], sent
    assert len(sent) == 3, sent  # create and claim; the snapshot; the reply and publication
    (snapshot,) = run.messages().filter(kind="dynamic_context")
    # Private context has no event (issue 35 H3): the step wrote none for the snapshot.
    assert "gold" in snapshot.content[0]["text"]
    assert snapshot.pk not in [e.payload.get("message_id") for e in run.events()]
    assert "gold" not in str([e.payload for e in run.events()])
