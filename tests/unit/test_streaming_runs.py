"""Inline runs stream: ``agent.run(..., on_delta=)`` and ``conv.ask(..., on_delta=)`` get each
chunk as a :class:`~turnkit_django.Delta` stamped with the turn, the claim's fence and a running
index, while the model call runs (no transaction open); the committed messages are those of the
same exchange without streaming. ``TURNKIT["STREAMING"] = False`` never asks for a stream."""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from tests.unit.fixtures.sse_server import Json, Stream, fake_provider, openai_frames
from tests.unit.fixtures.wire import allow_network
from turnkit_django import Agent, Delta, InputError
from turnkit_django.clients import OpenAIClient
from turnkit_django.models import Conversation, Message, Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

TEXTS = [f"word{i} " for i in range(12)]
TEXT = "".join(TEXTS)
STARTED = re.compile(r"started at \d{4}-\d\d-\d\d \d\d:\d\d")
PLAIN = {"id": "chatcmpl-1", "object": "chat.completion", "model": "gpt-5.1",
         "choices": [{"index": 0, "message": {"role": "assistant", "content": TEXT},
                      "finish_reason": "stop"}],
         "usage": {"prompt_tokens": 30, "completion_tokens": 40, "total_tokens": 70,
                   "prompt_tokens_details": {"cached_tokens": 5}}}


@pytest.fixture(autouse=True)
def _network(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    monkeypatch.delenv("OPENAI_BASE_URL", raising=False)
    with allow_network():
        yield


def _agent(url: str, name: str = "streamer") -> Agent:
    return Agent(name, model="gpt-5.1", client=OpenAIClient(api_key="sk-test", base_url=url,
                                                            max_retries=0, timeout=10))


def _stored(run: Any) -> list[tuple[str, str, Any, Any]]:
    """The run's messages, with the minute the turn started masked (two runs may straddle one)."""
    rows = Message.objects.filter(conversation_id=run.row.conversation_id).order_by("sequence")
    return [(m.role, m.kind, json.loads(STARTED.sub("started at <minute>", json.dumps(m.content))),
             m.metadata) for m in rows]


def test_agent_run_delivers_stamped_deltas_inline_and_commits_the_unstreamed_message():
    seen: list[Delta] = []
    atomic_depth = len(connection.atomic_blocks)
    depths: list[int] = []

    def on_delta(delta: Delta) -> None:
        seen.append(delta)
        depths.append(len(connection.atomic_blocks))

    with fake_provider(Stream(openai_frames(TEXTS), delay=0.005), Json(200, PLAIN),
                       path="/v1") as provider:
        agent = _agent(provider.url)
        streamed = agent.run("Where is order 42?", on_delta=on_delta)
        plain = agent.run("Where is order 42?")
    assert streamed.status == plain.status == "completed"
    assert [d.text for d in seen] == TEXTS
    assert [d.index for d in seen] == list(range(12))
    assert {(d.turn_id, d.kind, d.is_delta) for d in seen} == {(streamed.id, "text", True)}
    # The fence of the run's one claim (releasing it at the end moved the turn's fence on).
    assert {d.fence for d in seen} == {streamed.row.fence - 1} == {1}
    assert depths == [atomic_depth] * 12  # no transaction of ours open while the stream is read
    assert provider.bodies[0]["stream"] is True and "stream" not in provider.bodies[1]
    assert _stored(streamed) == _stored(plain)
    assert streamed.row.usage == plain.row.usage and streamed.row.usage["output_tokens"] == 40


def test_streaming_false_never_asks_for_a_stream(settings):
    settings.TURNKIT = {**settings.TURNKIT, "STREAMING": False}
    seen: list[Delta] = []
    with fake_provider(Json(200, PLAIN), path="/v1") as provider:
        run = _agent(provider.url).run("Where is order 42?", on_delta=seen.append)
    assert run.status == "completed" and run.output_text == TEXT
    assert "stream" not in provider.bodies[0] and seen == []


def test_a_broken_stream_fails_the_model_call_and_commits_no_partial_message():
    seen: list[Delta] = []
    with fake_provider(Stream(openai_frames(TEXTS[:5], done=False)), path="/v1") as provider:
        run = _agent(provider.url).run("Where is order 42?", on_delta=seen.append)
    assert [d.text for d in seen] == TEXTS[:5]
    assert run.status == "failed" and "stream" in (run.row.error or {}).get("message", "")
    assert not Message.objects.filter(conversation_id=run.row.conversation_id,
                                      role="assistant").exists()


def test_a_failing_on_delta_is_logged_once_and_the_turn_goes_on(caplog):
    calls: list[int] = []

    def broken(delta: Delta) -> None:
        calls.append(delta.index)
        raise RuntimeError("the websocket went away")

    agent = Agent("chunky", client=ScriptedClient([reply("hello world", chunks=4)]))
    with caplog.at_level(logging.ERROR, logger="turnkit_django"):
        run = agent.run("hi", on_delta=broken)
    assert run.status == "completed" and run.output_text == "hello world"
    assert calls == [0, 1, 2, 3]
    assert len([r for r in caplog.records if "on_delta" in r.getMessage()]) == 1


def test_test_clients_split_replies_into_chunks_for_conv_ask():
    seen: list[Delta] = []
    client = FunctionClient(lambda request: reply("hello streaming world", chunks=3,
                                                  delay=0.001))
    conv = Agent("chunks", client=client).conversation()
    turn = conv.ask("hi", on_delta=seen.append)
    assert turn.output_text == "hello streaming world"
    assert len(seen) == 3 and "".join(d.text for d in seen) == "hello streaming world"
    assert {d.turn_id for d in seen} == {turn.id}
    assert ScriptedClient.supports_streaming and FunctionClient.supports_streaming


def _counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Conversation, Turn, Message))


@pytest.mark.parametrize("entry", [
    lambda agent, conv: agent.submit("go", on_delta=print),
    lambda agent, conv: agent.prepare("go", on_delta=print),
    lambda agent, conv: conv.ask("hi", submit=True, on_delta=print),
    lambda agent, conv: agent.run("go", on_delta="myapp.deltas.show"),
], ids=["submit", "prepare", "ask_submit", "not_callable"])
def test_an_on_delta_that_cannot_be_called_inline_is_refused_before_any_write(entry):
    agent = Agent("refused", client=ScriptedClient([reply("ok")]))
    conv = agent.conversation()
    before = _counts()
    with pytest.raises(InputError, match="on_delta="):
        entry(agent, conv)
    assert _counts() == before

