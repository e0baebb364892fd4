"""Media operations on PostgreSQL with real second connections: claim races, no lock held during
the provider call, a heartbeat that keeps the turn's lease while the provider works, and no
claim inside an atomic block."""

from __future__ import annotations

import threading
from functools import partial
from typing import Any

import pytest
from django.db import DatabaseError, transaction

from tests.concurrency.threads import Race, Worker, wait_until
from tests.dispatch import override_turnkit
from turnkit_django import (
    Agent,
    AtomicBlockError,
    InvalidTransition,
    LostClaim,
    load_turn,
    reconcile,
    tool,
)
from turnkit_django.clients.media import GeneratedImage, ImageResult
from turnkit_django.models import Message, Turn
from turnkit_django.store import lease_of
from turnkit_django.testing import PNG, FunctionClient, FunctionMediaClient, call, reply

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("background", "media_root")]


def tree_lock_is_free(root_id: str) -> bool:
    """Whether another connection can take the tree lock (the root row) at once."""

    def probe() -> bool:
        try:
            with transaction.atomic():
                Turn.objects.select_for_update(nowait=True).filter(pk=root_id).exists()
            return True
        except DatabaseError:
            return False

    worker = Worker(probe)
    worker.start()
    return bool(worker.outcome())


def paint_or_refusal(turn_id: str, client: FunctionMediaClient) -> str:
    try:
        load_turn(turn_id).paint("A teapot", client=client)
    except InvalidTransition:
        return "refused"
    return "painted"


def held_provider() -> tuple[threading.Event, threading.Event, FunctionMediaClient]:
    """An image client whose paint waits: ``entered`` once called, answering on ``release``."""
    entered, release = threading.Event(), threading.Event()

    def held_paint(request: Any) -> ImageResult:
        entered.set()
        assert release.wait(30), "the test never released the provider"
        return ImageResult(images=(GeneratedImage(data=PNG),), model="gpt-image-1")

    return entered, release, FunctionMediaClient(paint=held_paint)


def test_two_callers_painting_one_pending_turn_make_one_image(registered: Any) -> None:
    agent = registered(Agent("race_artist", client=FunctionClient(lambda r: reply("x"))))
    images = FunctionMediaClient()
    with Race(2) as race:
        for round_ in range(15):
            run = agent.prepare(f"round {round_}")
            outcomes = race.round([partial(paint_or_refusal, run.id, images)] * 2)
            assert sorted(outcomes) == ["painted", "refused"], f"round {round_}: {outcomes}"
            assert Message.objects.filter(turn_id=run.id, kind="image").count() == 1
            assert Turn.objects.get(pk=run.id).status == "completed"
    assert len(images.requests) == 15, "one paid generation per turn"


def test_no_lock_is_held_and_the_heartbeat_runs_while_the_provider_paints(
        registered: Any) -> None:
    entered, release, held = held_provider()

    agent = registered(Agent("slow_artist", client=FunctionClient(lambda r: reply("x"))))
    run = agent.prepare("Draw slowly")
    with override_turnkit(HEARTBEAT_INTERVAL=0.1, LEASE=0.6, RECONCILE_INTERVAL=0.3):
        painter = Worker(load_turn(run.id).paint, "A teapot", client=held)
        painter.start()
        assert entered.wait(30)
        assert tree_lock_is_free(run.id), "a transaction was held during the provider call"
        first = lease_of(run.id)
        wait_until(lambda: lease_of(run.id) > first, what="a heartbeat")
        second = lease_of(run.id)
        wait_until(lambda: lease_of(run.id) > second, what="another")
        report = reconcile()
        assert run.id not in report.stale + report.recovered, "a live call kept its lease"
        release.set()
        painter.outcome()
    assert Turn.objects.get(pk=run.id).status == "completed"


def test_a_tool_painting_holds_no_lock_during_the_provider_call(registered: Any) -> None:
    seen: dict[str, bool] = {}

    def paint_and_probe(request: Any) -> ImageResult:
        seen["free"] = tree_lock_is_free(seen_root["id"])
        return ImageResult(images=(GeneratedImage(url="https://img.example/1.png"),),
                           model="gpt-image-1")

    seen_root: dict[str, str] = {}
    images = FunctionMediaClient(paint=paint_and_probe)

    @tool
    def draw(ctx: Any) -> str:
        """Draw."""
        seen_root["id"] = ctx.turn.row.root_turn_id
        return str(ctx.turn.paint("A teapot", client=images).message_id)

    agent = registered(Agent("tool_artist", tools=[draw], client=FunctionClient(
        lambda r: call("draw", id="c1") if r.last_message_is_user() else reply("done"))))
    run = agent.run("Draw")
    assert run.status == "completed" and seen == {"free": True}


def test_paint_on_a_pending_turn_inside_an_atomic_block_is_refused(registered: Any) -> None:
    """The claim must commit before the provider call, or it would hold the block open."""
    run = registered(Agent("atomic_artist", client=FunctionClient(lambda r: reply("x")))).prepare(
        "Draw")
    images = FunctionMediaClient()
    with pytest.raises(AtomicBlockError, match=r"turn\.paint"), transaction.atomic():
        run.turn.paint("A teapot", client=images)
    assert images.requests == [] and run.refresh().status == "pending"
    assert run.turn.paint("A teapot", client=images).message_id, "outside the block it runs"


def test_a_pending_turns_media_call_hung_past_model_timeout_lets_the_turn_go_stale(
        registered: Any) -> None:
    entered, release, held = held_provider()

    run = registered(Agent("hung_artist", client=FunctionClient(lambda r: reply("x")))).prepare(
        "Draw")
    with override_turnkit(HEARTBEAT_INTERVAL=0.1, LEASE=0.5, RECONCILE_INTERVAL=0.2,
                          MODEL_TIMEOUT=0.3):
        painter = Worker(load_turn(run.id).paint, "A teapot", client=held)
        painter.start()
        try:
            assert entered.wait(30)
            wait_until(lambda: run.id in reconcile().stale, timeout=10,
                       what="reconcile to find the hung inline turn abandoned")
        finally:
            release.set()
        with pytest.raises(LostClaim):
            painter.outcome()  # the late answer is fenced out
    row = Turn.objects.get(pk=run.id)
    assert row.status == "stale" and row.state["media"][f"turnkit:{run.id}:paint"][
        "status"] == "requested"
    assert not Message.objects.filter(turn_id=run.id, kind="image").exists()
