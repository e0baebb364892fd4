"""Cancellation (issue 4; architecture section 8): repair, fencing, cascade, sweep, authorization.

Running turns are built the way the runtime builds them: a real claim, then fenced writes of an
assistant message with tool calls and the intent rows of the calls in progress.
"""

from __future__ import annotations

import io
from collections.abc import Iterator, Sequence
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from tests.dispatch import background, override_turnkit, recorded
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import DENIALS, answering, policy, policy_calls, snapshot
from turnkit_django import Agent, AuthorizationError, LostClaim, services, store, tool
from turnkit_django.api.handles import Run
from turnkit_django.base.error_records import unknown_result
from turnkit_django.base.states import Phase
from turnkit_django.events import turn_cancelled
from turnkit_django.messages import TextPart, ToolCallPart, load_parts
from turnkit_django.models import Delivery, Message, ToolExecution, Turn
from turnkit_django.testing import FunctionClient, call, reply

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


# --------------------------------------------------------------------------- builders


def running(turn: Turn, *, calls: Sequence[str] = ("call_1", "call_2"),
            started: Sequence[str] = ("call_1",)) -> store.Claim:
    """Claim ``turn`` and leave it mid-batch: ``calls`` asked for, ``started`` running."""
    claim = store.claim(turn.pk, "worker-under-test")
    assert claim is not None
    fenced = store.Fenced(claim)
    with fenced.atomic():
        fenced.append("assistant", [ToolCallPart(c, "lookup", {}) for c in calls],
                      kind="tool_call")
        for call_id in started:
            fenced.open_execution(ToolCallPart(call_id, "lookup", {}), "running",
                                  started_at=timezone.now(), attempts=1)
        fenced.record(store.TurnState(phase=Phase.TOOLS))
    return claim


def child_of(parent: Turn, name: str = "child") -> Turn:
    """A submitted child turn of ``parent`` in a fresh child conversation."""
    row = services.new_turn(answering(name), [TextPart(f"task for {name}")], parent=parent,
                            principal=parent.principal)
    return services.submit(row)


def tree() -> dict[str, Turn]:
    """root (running, mid-batch) → a (running, mid-batch) → a1 (pending); root → b (pending)."""
    root = Run.create(answering("root"), "orchestrate", principal={"tenant": "t1"}).submit()
    running(root.row)
    a = child_of(root.row, "a")
    running(a)
    a1 = child_of(a, "a1")
    b = child_of(root.row, "b")
    return {"root": root.row, "a": a, "a1": a1, "b": b}


def statuses(turns: dict[str, Turn]) -> dict[str, str]:
    return {name: Turn.objects.get(pk=row.pk).status for name, row in turns.items()}


@pytest.fixture
def cancelled_events() -> Iterator[list[Any]]:
    seen: list[Any] = []

    def receive(sender: Any, event: Any, **kwargs: Any) -> None:
        seen.append(event)

    turn_cancelled.connect(receive)
    yield seen
    turn_cancelled.disconnect(receive)


def results_of(turn_id: str) -> dict[str, Any]:
    found = {}
    for message in Message.objects.filter(turn_id=turn_id, role="tool"):
        for part in load_parts(message.content):
            found[part.tool_call_id] = part.content
    return found


# --------------------------------------------------------------------------- one turn


def test_cancel_interrupts_running_tools_repairs_the_transcript_and_fences_out_the_worker(
        django_capture_on_commit_callbacks, cancelled_events):
    run = Run.create(answering("worker"), "work").submit()
    claim = running(run.row)

    with django_capture_on_commit_callbacks(execute=True):
        returned = run.cancel(principal={"user": 1})

    assert returned is run
    row = Turn.objects.get(pk=run.id)
    assert row.status == "cancelled" and run.status == "cancelled"
    assert row.error["type"] == "Cancelled" and row.error["by"] == {"user": 1}
    assert row.completed_at is not None and row.claimed_by == ""
    assert row.fence == claim.fence + 1
    executions = dict(ToolExecution.objects.filter(turn_id=run.id)
                      .values_list("tool_call_id", "status"))
    assert executions == {"call_1": "interrupted", "call_2": "cancelled"}
    results = results_of(run.id)
    assert results["call_1"] == unknown_result()
    assert results["call_2"]["error"] == "not_executed"
    # The worker that still holds the old fence can never write again.
    with pytest.raises(LostClaim), store.Fenced(claim).atomic():
        pytest.fail("a revoked claim entered a fenced section")
    with pytest.raises(LostClaim):
        store.heartbeat(claim)
    assert [e.turn_id for e in cancelled_events] == [run.id]


def test_cancel_twice_and_cancelling_a_finished_turn_change_nothing():
    run = Run.create(answering("worker"), "work").submit()
    first = services.cancel(run.row)
    before = snapshot()
    again = services.cancel(run.row, cascade=True)
    assert first.changed and first.cancelled == [run.id]
    assert not again.changed and again.status == "cancelled"
    assert snapshot() == before

    done = answering("finisher").run("finish")
    assert done.status == "completed"
    before = snapshot()
    for cascade in (False, True):
        report = services.cancel(done.id, cascade=cascade)
        assert not report.changed and report.status == "completed"
    assert snapshot() == before
    assert done.refresh().status == "completed"


def test_a_tool_cancelling_its_own_turn_loses_its_result_and_the_model_is_not_called_again():
    @tool
    def stop_me(ctx) -> str:
        """Cancel the turn from inside a running tool, as a concurrent operator would."""
        ctx.turn.cancel()
        return "this result must not be written"

    client = FunctionClient(lambda request: call("stop_me", id="call_stop"))
    run = Agent("self_stopper", tools=[stop_me], client=client).run("go")

    assert run.status == "cancelled"
    assert len(client.requests) == 1
    assert results_of(run.id) == {"call_stop": unknown_result()}
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert execution.status == "interrupted"


def test_cancel_hands_the_lane_to_the_next_submitted_turn(django_capture_on_commit_callbacks):
    agent = answering("lane")
    conversation = agent.conversation()
    first = conversation.ask("one", submit=True)
    second = conversation.ask("two", submit=True)
    running(first.row, calls=("call_1",), started=())

    with django_capture_on_commit_callbacks(execute=True):
        first.cancel()

    assert recorded()[-1] == second.id
    assert second.refresh().status == "pending"


# --------------------------------------------------------------------------- trees


def test_retain_cancels_only_the_target_and_leaves_children_running():
    turns = tree()
    fences = {name: Turn.objects.get(pk=row.pk).fence for name, row in turns.items()}
    report = services.cancel(turns["root"])
    assert report.cancelled == [turns["root"].pk]
    assert statuses(turns) == {"root": "cancelled", "a": "running", "a1": "pending",
                               "b": "pending"}
    for name in ("a", "a1", "b"):
        assert Turn.objects.get(pk=turns[name].pk).fence == fences[name]
    # The sweep leaves a retained tree alone.
    assert services.cancel_sweep() == []
    assert statuses(turns)["a"] == "running"
    # Only the root's transcript was repaired.
    assert set(results_of(turns["root"].pk)) == {"call_1", "call_2"}
    assert results_of(turns["a"].pk) == {}


def test_cascade_cancels_every_descendant_and_records_the_cascade(cancelled_events,
                                                                  django_capture_on_commit_callbacks):
    turns = tree()
    with django_capture_on_commit_callbacks(execute=True):
        report = Run(turns["root"]).cancel(cascade=True, principal={"user": 9})
    assert statuses(turns) == dict.fromkeys(turns, "cancelled")
    root = Turn.objects.get(pk=turns["root"].pk)
    assert root.options["cancel_cascade"] is True
    for name in ("a", "a1", "b"):
        row = Turn.objects.get(pk=turns[name].pk)
        assert row.error["cancelled_turn"] == root.pk and row.error["by"] == {"user": 9}
    assert report.status == "cancelled"
    assert set(results_of(turns["a"].pk)) == {"call_1", "call_2"}
    assert {e.turn_id for e in cancelled_events} == {row.pk for row in turns.values()}
    # A second cascade is a no-op.
    before = snapshot()
    assert not services.cancel(turns["root"], cascade=True).changed
    assert snapshot() == before


def test_cancelling_a_child_with_cascade_leaves_its_parent_and_siblings():
    turns = tree()
    services.cancel(turns["a"], cascade=True)
    assert statuses(turns) == {"root": "running", "a": "cancelled", "a1": "cancelled",
                               "b": "pending"}


def test_cascade_after_a_plain_cancel_reaches_the_descendants():
    turns = tree()
    services.cancel(turns["root"])
    report = services.cancel(turns["root"], cascade=True)
    assert sorted(report.cancelled) == sorted(turns[n].pk for n in ("a", "a1", "b"))
    assert statuses(turns) == dict.fromkeys(turns, "cancelled")


def test_a_large_cascade_is_bounded_per_call_and_finished_by_cancel_sweep():
    root = Run.create(answering("root"), "big").submit().row
    children = [child_of(root, f"c{i}") for i in range(3)]
    grandchildren = [child_of(children[0], f"g{i}") for i in range(3)]
    bystander = Run.create(answering("bystander"), "unrelated").submit()
    everyone = [root, *children, *grandchildren]

    with override_turnkit(MAINTENANCE_BATCH_SIZE=2):
        report = services.cancel(root, cascade=True)
        assert len(report.cancelled) == 2 and report.remaining == 5
        sweeps = []
        while swept := services.cancel_sweep():
            assert len(swept) <= 2
            sweeps.append(swept)
    assert [len(swept) for swept in sweeps] == [2, 2, 1]
    assert {Turn.objects.get(pk=t.pk).status for t in everyone} == {"cancelled"}
    assert bystander.refresh().status == "pending"


def test_an_active_turn_under_a_finished_intermediate_is_cancelled_by_the_call_itself():
    root = Run.create(answering("root"), "launch").submit().row
    finished = services.new_turn(answering("finished"), [TextPart("quick")], parent=root)
    Run(finished, answering("finished")).execute()
    assert Turn.objects.get(pk=finished.pk).status == "completed"
    launched = child_of(finished, "launched")

    with override_turnkit(MAINTENANCE_BATCH_SIZE=1):
        report = services.cancel(root, cascade=True)
    assert launched.pk in report.cancelled
    assert Turn.objects.get(pk=launched.pk).status == "cancelled"
    assert Turn.objects.get(pk=finished.pk).status == "completed"


# --------------------------------------------------------------------------- callbacks


def test_cancel_creates_the_completion_callback_and_delivers_it(
        registered, django_capture_on_commit_callbacks):
    parent = registered(answering("parent_agent")).conversation()
    run = answering("helper").prepare("help").submit(callback=parent)

    with django_capture_on_commit_callbacks(execute=True):
        run.cancel()

    delivery = Delivery.objects.get(key=f"completion:{run.id}")
    assert delivery.payload["envelope"]["status"] == "cancelled"
    assert delivery.delivered_at is not None
    message = Message.objects.get(pk=delivery.message_id)
    assert message.conversation_id == parent.id and message.metadata["callback"] is True


def test_a_denied_callback_is_recorded_and_the_turn_stays_cancelled(policy_calls):
    from tests import orchestration

    parent = answering("parent_agent").conversation()
    run = answering("helper").prepare("help").submit(callback=parent)
    orchestration.denied_actions.add("callback")
    with policy("tests.orchestration.selective"):
        run.cancel()
    assert run.status == "cancelled"
    assert run.row.options["callback_denied"] is True
    assert not Delivery.objects.exists()


# --------------------------------------------------------------------------- authorization


def test_cancel_asks_the_policy_for_the_target_and_every_descendant(policy_calls):
    turns = tree()
    with policy("tests.orchestration.allow"):
        services.cancel(turns["root"], cascade=True, principal={"user": 3})
    asked = [(action, principal, resources["turn_id"]) for action, principal, resources
             in policy_calls]
    assert sorted(asked) == sorted(("cancel", {"user": 3}, row.pk) for row in turns.values())
    assert statuses(turns) == dict.fromkeys(turns, "cancelled")


@pytest.mark.parametrize("path", DENIALS)
def test_a_denied_cancel_raises_and_writes_nothing(path):
    turns = tree()
    before = snapshot()
    with policy(path), pytest.raises(AuthorizationError):
        services.cancel(turns["root"], cascade=True, principal={"user": 3})
    assert snapshot() == before


def test_one_denied_descendant_stops_the_whole_cascade_before_any_change(policy_calls):
    from tests import orchestration

    turns = tree()
    orchestration.denied_turns.add(turns["a1"].pk)
    before = snapshot()
    with policy("tests.orchestration.selective"), pytest.raises(AuthorizationError):
        Run(turns["root"]).cancel(cascade=True)
    assert snapshot() == before
    # Without the cascade the denied grandchild is not touched, so the cancel is allowed.
    with policy("tests.orchestration.selective"):
        Run(turns["root"]).cancel()
    assert statuses(turns)["root"] == "cancelled"


def test_a_denied_principal_cannot_probe_finished_turns():
    done = answering("finisher").run("finish")
    with policy("tests.orchestration.deny"), pytest.raises(AuthorizationError):
        done.cancel()


# --------------------------------------------------------------------------- entry points


def test_turnkit_cancel_command():
    turns = tree()
    out = io.StringIO()
    call_command("turnkit_cancel", turns["root"].pk, "--cascade", stdout=out)
    assert "cancelled 4 turn(s)" in out.getvalue()
    out = io.StringIO()
    call_command("turnkit_cancel", turns["root"].pk, stdout=out)
    assert "already cancelled; nothing changed" in out.getvalue()
    with pytest.raises(CommandError, match="no turn"):
        call_command("turnkit_cancel", "turn_missing")
    with pytest.raises(CommandError, match="--principal must be JSON"):
        call_command("turnkit_cancel", turns["root"].pk, "--principal", "{nope")


def test_turnkit_cancel_command_reports_a_denial():
    run = Run.create(answering("worker"), "work").submit()
    with policy("tests.orchestration.deny"), pytest.raises(CommandError, match="not authorized"):
        call_command("turnkit_cancel", run.id, "--principal", '{"user": 1}')
    assert run.refresh().status == "pending"


def test_cancel_sweep_is_a_celery_task_on_the_beat_schedule():
    from turnkit_django.celery import beat_schedule, cancel_sweep

    assert cancel_sweep.name == "turnkit.cancel_sweep"
    assert beat_schedule()["turnkit-cancel-sweep"]["task"] == "turnkit.cancel_sweep"


def test_a_model_reply_after_cancel_is_never_written():
    """An in-flight model call cannot be recalled, but its response cannot be written."""
    holder: dict[str, Any] = {}

    def respond(request):
        Run(Turn.objects.get(pk=holder["id"])).cancel()
        return reply("too late")

    run = Run.create(Agent("slow_model", client=FunctionClient(respond)), "think")
    holder["id"] = run.id
    run.execute()
    assert run.status == "cancelled" and run.output_text == ""
    assert not Message.objects.filter(turn_id=run.id, role="assistant").exists()


def test_a_turn_under_a_cascade_the_batch_did_not_reach_is_never_claimed():
    """A cascade larger than one batch leaves descendants to cancel_sweep; a worker that gets
    their doorbell first must not run them (nothing of the tree runs after the cancel)."""
    root = Run.create(answering("root"), "big").submit().row
    children = [child_of(root, f"c{i}") for i in range(3)]
    grandchild = child_of(children[0], "g0")
    with override_turnkit(MAINTENANCE_BATCH_SIZE=1):
        report = services.cancel(root, cascade=True)
    assert report.remaining
    for turn in (*children, grandchild):
        assert services.run_turn(turn.pk) is False
        assert store.claim(turn.pk, "another worker") is None
    assert {Turn.objects.get(pk=t.pk).status for t in children} <= {"pending", "cancelled"}
    while services.cancel_sweep():
        pass
    assert {Turn.objects.get(pk=t.pk).status for t in (*children, grandchild)} == {"cancelled"}
