"""``await agent.arun(...)`` and ``await conv.aask(...)`` (issue 38): the inline run for async
callers, in a thread of its own, its deltas delivered as the sync call delivers them."""

from __future__ import annotations

import asyncio
import threading

import pytest

from turnkit_django import Agent
from turnkit_django.testing import ScriptedClient, reply

pytestmark = pytest.mark.django_db(transaction=True)


def test_arun_runs_inline_off_the_event_loop_and_streams(registered):
    agent = registered(Agent("async-entry", client=ScriptedClient(
        [reply("hello there world", chunks=3)])))
    threads: set[int] = set()
    texts: list[str] = []

    def on_delta(delta):  # type: ignore[no-untyped-def]
        threads.add(threading.get_ident())
        texts.append(delta.text)

    async def main() -> object:
        loop_thread = threading.get_ident()
        run = await agent.arun("greet", on_delta=on_delta)
        assert loop_thread not in threads  # the run did not block the event loop's thread
        return run

    run = asyncio.run(main())
    assert run.status == "completed" and run.output_text == "hello there world"
    assert "".join(texts) == "hello there world"


def test_aask_answers_in_the_conversation(registered):
    agent = registered(Agent("async-ask", client=ScriptedClient([reply("one"), reply("two")])))
    conv = agent.conversation()

    async def main() -> list[str]:
        first = await conv.aask("a")
        second = await conv.aask("b")
        return [first.output_text, second.output_text]

    assert asyncio.run(main()) == ["one", "two"]
