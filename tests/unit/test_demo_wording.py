"""What ``make demo`` and ``turnkit_show`` print reads as English.

A run's summary counts model calls and turns with singular and plural nouns ("1 model call in
1 turn"), and the demo's timeline never prints ``None`` for a value an event does not carry
(``turn.waiting`` has targets, not an output or an error).
"""

from __future__ import annotations

from typing import Any

import pytest

from example_project.demo import describe
from turnkit_django import Agent
from turnkit_django.console.transcript_text import summary
from turnkit_django.testing import FunctionClient, reply


@pytest.mark.django_db
def test_a_single_model_call_in_a_single_turn_is_singular(registered: Any) -> None:
    agent = registered(Agent("wording_one", client=FunctionClient(lambda r: reply("done"))))
    run = agent.run("hello")
    (usage,) = [line for line in summary(run) if line.lstrip().startswith("usage")]
    assert "1 model call in 1 turn (wording_one)" in usage, usage


def test_the_timeline_says_what_a_turn_waits_for_not_none() -> None:
    waiting = {"type": "turn.waiting", "payload": {"targets": ["turn_a"]},
               "row": {"agent_name": "support"}}
    assert describe(waiting) == "support · waiting for 1 turn"
    waiting["payload"] = {"targets": ["turn_a", "turn_b"]}
    assert describe(waiting) == "support · waiting for 2 turns"
    bare = {"type": "turn.paused", "payload": {}, "row": {"agent_name": "support"}}
    assert describe(bare) == "support"
    done = {"type": "turn.completed", "payload": {"output_text": "ok"},
            "row": {"agent_name": "support"}}
    assert describe(done) == "support · ok"
    for entry in (waiting, bare, done):
        assert "None" not in describe(entry)
