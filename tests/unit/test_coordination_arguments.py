"""Hostile arguments to the coordination tools (``launch_agent``, ``wait_for``, ``send_message``).

The model writes these arguments. Whatever it sends, the call is a failed tool result it can
read and act on, and nothing is written for it.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.orchestration import scripted, tool_results
from turnkit_django import Agent, services
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import launch_agent, send_message, wait_for

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
