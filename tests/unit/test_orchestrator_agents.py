"""Orchestrator agents (issue 16; TurnKit ``Agent(orchestrator: true)``): the orchestrator
preamble first in the prompt, and the task prompt mode unless another is chosen."""

from __future__ import annotations

import pytest

from turnkit_django import Agent, ConfigurationError
from turnkit_django.agents.prompting import BEHAVIOUR, ORCHESTRATOR
from turnkit_django.testing import ScriptedClient, reply

pytestmark = pytest.mark.django_db

worker = Agent("worker", description="Does one part.")


def test_the_preamble_leads_the_prompt_and_the_task_mode_is_the_default():
    lead = Agent("lead", instructions="Plan the launch.", orchestrator=True, sub_agents=[worker],
                 client=ScriptedClient([reply("ok")] * 2))

    for request in (lead.prepare("Launch it").preview(),
                    lead.conversation().prepare_turn().preview()):
        assert request.metadata["prompt"]["sections"][:3] == ["orchestrator", "agent",
                                                              "instructions"]
        assert request.stable_instructions.startswith(ORCHESTRATOR + "\n\nYou are lead.")
        assert BEHAVIOUR["task"] in request.stable_instructions  # even in a conversation
    assert lead.prompt_mode == "task"


def test_an_explicit_prompt_mode_wins_and_plain_agents_have_no_preamble():
    full = Agent("lead", orchestrator=True, prompt_mode="full")
    assert full.prompt_mode == "full"
    plain = Agent("plain", client=ScriptedClient([reply("ok")]))
    request = plain.conversation().prepare_turn().preview()
    assert "orchestrator" not in request.metadata["prompt"]["sections"]
    assert ORCHESTRATOR not in request.stable_instructions


def test_orchestrator_must_be_a_boolean():
    with pytest.raises(ConfigurationError, match="orchestrator must be True or False"):
        Agent("lead", orchestrator="yes")  # type: ignore[arg-type]
