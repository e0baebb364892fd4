"""Hostile arguments to the coordination tools (``launch_agent``, ``wait_for``, ``send_message``).

The model writes these arguments. Whatever it sends, the call is a failed tool result it can
read and act on, nothing is written for it, and the result stays small: the tool never hands a
model's oversized input back to it.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.orchestration import scripted, tool_results
from turnkit_django import Agent, services
from turnkit_django.models import Delivery, Turn, Wait
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import launch_agent, send_message, wait_for
from turnkit_django.tools.coordination import MAX_WAIT_TARGETS

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]


def coordinator(registered: Any, *steps: Any) -> Agent:
    helper = Agent("helper", description="Helps.",
                   client=FunctionClient(lambda request: reply("helped")))
    return registered(Agent("coordinator", tools=[launch_agent, wait_for, send_message],
                            sub_agents=[helper], client=FunctionClient(scripted(*steps))))


def only_result(registered: Any, entry: Any) -> tuple[Turn, dict[str, Any]]:
    """Submit a coordinator whose model makes the one call ``entry``; return the root and the
    call's (failed) result."""
    run = coordinator(registered, entry, reply("ok")).submit("coordinate")
    assert services.run_turn(run.id)
    row = Turn.objects.get(pk=run.id)
    ((_id, is_error, content),) = tool_results(run.id)
    assert is_error, content
    return row, content


@pytest.mark.parametrize("task", ["", "   ", "\n\t"])
def test_launch_agent_with_a_blank_task_launches_nothing(registered, task):
    # A child with an empty task has no input: a provider refuses the request (an empty or
    # whitespace-only text block), so the child could only fail, after the model was told it
    # had started. A sub-agent tool refuses such a task too (child_task).
    row, content = only_result(registered, call("launch_agent", id="c1", agent="helper",
                                                task=task))
    assert row.status == "completed"
    assert content["error"] == "invalid_arguments"
    assert content["problems"][0]["field"] == "task"
    assert not Turn.objects.filter(parent_turn_id=row.pk).exists()


HUGE = "x" * 100_000


@pytest.mark.parametrize("entry", [
    call("launch_agent", id="c1", agent=HUGE, task="t"),
    call("wait_for", id="c1", turn_ids=[f"turn_{HUGE}"]),
    call("send_message", id="c1", conversation_id=f"conv_{HUGE}", text="hi"),
], ids=["launch_agent", "wait_for", "send_message"])
def test_an_oversized_id_or_name_is_refused_without_echoing_it(registered, entry):
    # No turn or conversation id is longer than its 40-character column, no agent name longer
    # than 64 characters: such an argument names nothing, and answering "there is no turn
    # 'xxxx...'" gave the model back its 100,000 characters (and its context paid twice).
    row, content = only_result(registered, entry)
    assert row.status == "completed"
    assert content["error"] == "invalid_arguments"
    assert len(json.dumps(content)) < 1000
    assert not Turn.objects.filter(parent_turn_id=row.pk).exists()
    assert not Wait.objects.exists() and not Delivery.objects.exists()


def test_wait_for_takes_a_bounded_number_of_turns(registered):
    # Each target is checked for a cycle under the store-wide wait-graph lock, and every
    # result envelope goes back to the model: an unbounded list held the lock and filled the
    # context without limit.
    done = Agent("done", client=FunctionClient(lambda request: reply("d"))).run("go")
    ids = [done.id] * (MAX_WAIT_TARGETS + 1)
    row, content = only_result(registered, call("wait_for", id="c1", turn_ids=ids))
    assert row.status == "completed"
    assert content["error"] == "invalid_arguments"
    assert str(MAX_WAIT_TARGETS) in content["problems"][0]["problem"]
    assert not Wait.objects.exists()


def test_wait_for_at_the_bound_is_answered(registered):
    done = Agent("done", client=FunctionClient(lambda request: reply("d"))).run("go")
    run = coordinator(registered, call("wait_for", id="c1", turn_ids=[done.id] * MAX_WAIT_TARGETS),
                      reply("ok")).submit("coordinate")
    assert services.run_turn(run.id)
    ((_id, is_error, content),) = tool_results(run.id)
    assert not is_error and [r["turn_id"] for r in content["results"]] == [done.id]
