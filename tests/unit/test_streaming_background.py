"""Background runs stream (issue 38): a worker's model step publishes its chunks on the delta
channel (here the in-process one: no Redis broker), and ``run.stream()`` yields them between
the durable events, before the step's ``message.created``. A delta of an older fence is dropped;
a channel whose publish fails never fails the turn.

SQLite's shared in-memory database must never be written and read at once: the worker thread
runs the turn while the reader waits on the channel, and the reader's next read of the events
first joins the worker (tests/e2e/test_streaming_worker.py races a real worker on PostgreSQL).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator

import pytest

from turnkit_django import Agent, Delta, RunTimeout, services
from turnkit_django.conf.delta_channel import LocalChannel
from turnkit_django.models import Event, Turn
from turnkit_django.runtime import streaming as runtime_streaming
from turnkit_django.services import streaming
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


@pytest.fixture
def worker(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """Append a turn id: the reader's first read starts a worker thread running it, and its
    later reads join that thread first."""
    pending: list[str] = []
    threads: list[threading.Thread] = []
    real_read = streaming.read

    def read(row: Turn, after: int) -> tuple[list[Event], bool]:
        for thread in threads:
            thread.join(timeout=30)
        found = real_read(row, after)
        if pending:
            thread = threading.Thread(target=services.run_turn, args=(pending.pop(),))
            threads.append(thread)
            thread.start()
        return found

    monkeypatch.setattr(streaming, "read", read)
    monkeypatch.setattr(streaming, "FIRST_DELAY", 2.0)  # the worker streams in between
    yield pending
    for thread in threads:
        thread.join(timeout=30)


def test_run_stream_yields_the_deltas_of_a_background_step_before_its_message(registered,
                                                                              worker):
    agent = registered(Agent("streaming-bg", client=FunctionClient(
        lambda request: reply("hello streaming world", chunks=4, delay=0.01))))
    run = agent.submit("Say hello")
    worker.append(run.id)
    items = list(run.stream(timeout=30))
    kinds = ["delta" if item.is_delta else f"{item.type}:{item.payload.get('role', '')}"
             for item in items]
    assert kinds == ["message.created:user", "delta", "delta", "delta", "delta",
                     "message.created:assistant", "turn.completed:"]
    deltas = [item for item in items if isinstance(item, Delta)]
    assert "".join(d.text for d in deltas) == "hello streaming world"
    assert [d.index for d in deltas] == list(range(len(deltas))) and len(deltas) == 4
    run.row.refresh_from_db()
    assert {(d.turn_id, d.fence, d.kind) for d in deltas} == {(run.id, run.row.fence - 1, "text")}
    assert run.status == "completed"
    assert [e.pk for e in items if not isinstance(e, Delta)] == list(
        run.events().values_list("pk", flat=True))


def test_run_stream_drops_deltas_of_an_older_fence_and_times_out_while_the_run_is_pending(
        registered, monkeypatch):
    agent = registered(Agent("fenced", client=FunctionClient(lambda request: reply("x"))))
    run = agent.submit("x")
    channel = runtime_streaming.delta_channel()
    assert isinstance(channel, LocalChannel)
    real_read = streaming.read
    sent: list[Delta] = []

    def read(row: Turn, after: int) -> tuple[list[Event], bool]:
        if not sent:  # published while the reader is subscribed
            sent.extend([Delta(run.id, 2, 0, "text", "new "), Delta(run.id, 1, 5, "text", "old"),
                         Delta(run.id, 2, 1, "text", "text")])
            for delta in sent:
                channel.publish(run.id, delta)
        return real_read(row, after)

    monkeypatch.setattr(streaming, "read", read)
    seen = []
    with pytest.raises(RunTimeout):
        for item in run.stream(timeout=0.3):
            seen.append(item)
    assert [d.text for d in seen if isinstance(d, Delta)] == ["new ", "text"]
    assert not channel.may_listen(run.id)  # the subscription was closed


def test_a_failing_publish_is_logged_once_and_the_turn_completes(registered, monkeypatch,
                                                                 caplog):
    class Broken(LocalChannel):
        def may_listen(self, root_id: str) -> bool:
            return True

        def publish(self, root_id: str, delta: Delta) -> None:
            raise ConnectionError("redis is down")

    monkeypatch.setattr(runtime_streaming, "delta_channel", Broken)
    agent = registered(Agent("broken-channel", client=FunctionClient(
        lambda request: reply("still answered", chunks=3))))
    run = agent.submit("x")
    with caplog.at_level(logging.ERROR, logger="turnkit_django.runtime"):
        assert services.run_turn(run.id)
    run.row.refresh_from_db()
    assert run.status == "completed" and run.output_text == "still answered"
    assert [r.getMessage() for r in caplog.records].count(
        f"publishing a delta of turn {run.id} failed; the turn goes on without publishing its "
        "deltas until it is claimed again") == 1


def test_no_listener_in_process_means_no_stream_is_asked(registered):
    streamed: list[str] = []

    class Watched(FunctionClient):
        def stream(self, request, on_chunk):  # type: ignore[no-untyped-def]
            streamed.append(request.model)
            return super().stream(request, on_chunk)

    agent = registered(Agent("unwatched", client=Watched(lambda request: reply("quiet"))))
    run = agent.submit("x")
    assert services.run_turn(run.id)
    assert streamed == []
