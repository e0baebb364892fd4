"""Values nested deeper than the store serializes (pydantic stops at a few hundred levels) are
kept as their JSON text: a tool that already ran had its result lost and its turn failed, and a
model's structured output failed the turn it answered."""

from __future__ import annotations

import json

import pytest

from turnkit_django import Agent, tool
from turnkit_django.base.serialization import MAX_DEPTH, to_json
from turnkit_django.models import ToolExecution
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]
USAGE = {"input_tokens": 1, "output_tokens": 1}


def nested(levels: int) -> dict:
    value: dict = {}
    for _ in range(levels):
        value = {"a": value}
    return value


ran: list[str] = []


@tool
def deep_lookup() -> dict:
    """Return a deeply nested record."""
    ran.append("once")
    return nested(300)


def test_a_tool_result_too_deep_to_store_is_kept_as_its_json_text():
    ran.clear()
    agent = Agent("deep_results", tools=[deep_lookup], client=ScriptedClient(
        [call("deep_lookup", id="c1", usage=USAGE), reply("read it", usage=USAGE)]))
    run = agent.run("go")
    assert run.status == "completed", run.error
    assert ran == ["once"]
    (execution,) = ToolExecution.objects.filter(turn__root_turn_id=run.id)
    assert execution.status == "completed"
    assert json.loads(execution.result) == nested(300)


def test_structured_output_too_deep_to_store_is_kept_as_its_json_text():
    agent = Agent("deep_output", client=ScriptedClient([reply(data=nested(300), usage=USAGE)]))
    run = agent.run("go")
    assert run.status == "completed", run.error
    assert json.loads(run.output_data) == nested(300)


def test_values_within_the_depth_stay_data():
    assert to_json(nested(MAX_DEPTH - 1)) == nested(MAX_DEPTH - 1)
    assert isinstance(to_json(nested(MAX_DEPTH + 1)), str)
