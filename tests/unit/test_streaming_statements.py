"""Streaming adds no statement to a step (issue 38): deltas are never written, so an inline turn
streamed to ``on_delta=`` sends exactly the SQL statements of the same turn without streaming
(``TURNKIT["STREAMING"] = False``), step by step. ``make bench`` prints the same
(``bench/streaming.py``)."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import override_settings

from tests.stepcost import TurnCost, measure
from turnkit_django import Agent, Delta, tool
from turnkit_django.conf import turnkit_settings
from turnkit_django.testing import FunctionClient, call, reply

# Real commits, as tests/unit/test_step_cost.py counts them.
pytestmark = pytest.mark.django_db(transaction=True)

ANSWER = "Order 42 left the warehouse on Monday and arrives on Thursday."


@tool
def probe(n: int) -> dict:
    """Return its input."""
    return {"n": n}


def five_steps(request: Any) -> Any:  # model, tool, model, tool, model; the answer in 8 chunks
    done = sum(1 for m in request.messages if m.role == "tool")
    return call("probe", n=done) if done < 2 else reply(ANSWER, chunks=8)


AGENT = Agent("streamed-statements", tools=[probe], client=FunctionClient(five_steps),
              max_iterations=10)


def run_measured(deltas: list[Delta]) -> TurnCost:
    def run(on_event: Any) -> None:
        result = AGENT.run("Where is order 42?", on_event=on_event, on_delta=deltas.append)
        assert result.status == "completed", result.error

    return measure(run)


def shape(cost: TurnCost) -> list[tuple[str, int, int]]:
    return [(span.kind, len(span.statements), span.commits) for span in cost.spans]


def test_a_streamed_inline_turn_sends_the_statements_of_the_same_turn_not_streamed(settings):
    run_measured([])  # warm up: the first turn of a process reads what later ones keep
    streamed_deltas: list[Delta] = []
    streamed = run_measured(streamed_deltas)
    with override_settings(TURNKIT={**settings.TURNKIT, "STREAMING": False}):
        assert turnkit_settings.STREAMING is False
        plain_deltas: list[Delta] = []
        plain = run_measured(plain_deltas)

    # It did stream: 8 text chunks of the answer and one argument chunk per tool call.
    assert [d.kind for d in streamed_deltas] == ["tool_arguments"] * 2 + ["text"] * 8
    assert "".join(d.text for d in streamed_deltas if d.kind == "text") == ANSWER
    assert plain_deltas == []
    assert streamed.statements == plain.statements > 0
    assert shape(streamed) == shape(plain)
    assert [s.kind for s in streamed.spans] == ["setup", "model", "tool", "model", "tool",
                                                 "model"]
