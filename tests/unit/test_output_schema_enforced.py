"""A model's structured output is held to the turn's ``output_schema``. A provider that enforces
the schema never sends a misfit, but one that does not (a local server, an answer cut off at
``max_tokens``) did: the turn completed with whatever data came, or with none. A misfit is now
a violation of the ``output_schema`` rule, revised within ``output_retries`` like an output
policy's, then failed (or reported)."""

from __future__ import annotations

import pytest
from pydantic import BaseModel

from turnkit_django import Agent, tool
from turnkit_django.models import Message
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]
USAGE = {"input_tokens": 1, "output_tokens": 1}


class Verdict(BaseModel):
    ok: bool
    reason: str


def agent(*answers, **options) -> Agent:
    return Agent("judged", output_schema=Verdict,
                 client=ScriptedClient([*answers, reply("spare", usage=USAGE)]), **options)


def test_output_that_fits_the_schema_is_published_at_once():
    run = agent(reply(data={"ok": True, "reason": "fine"}, usage=USAGE)).run("judge")
    assert run.status == "completed" and run.output_data == {"ok": True, "reason": "fine"}
    assert run.audit is None


def test_a_misfit_is_sent_back_within_output_retries():
    run = agent(reply(data={"ok": "yes"}, usage=USAGE),
                reply(data={"ok": True, "reason": "fixed"}, usage=USAGE),
                output_retries=1).run("judge")
    assert run.status == "completed" and run.output_data == {"ok": True, "reason": "fixed"}
    (revision,) = Message.objects.filter(conversation_id=run.conversation_id,
                                         metadata__source="output_policy")
    assert "[output_schema]" in str(revision.content) and "reason" in str(revision.content)


@pytest.mark.parametrize("data, said", [
    ({"ok": True}, "reason"),
    (None, "no structured output"),
])
def test_a_misfit_without_retries_fails_the_turn_and_keeps_the_output(data, said):
    answer = reply("Looks fine to me.", usage=USAGE) if data is None else reply(data=data,
                                                                                 usage=USAGE)
    run = agent(answer).run("judge")
    assert run.status == "failed"
    assert run.error["type"] == "OutputPolicyViolation" and said in run.error["message"]
    assert run.output_data == data


def test_report_mode_publishes_a_misfit_with_its_audit():
    run = agent(reply(data={"ok": 1, "reason": "x"}, usage=USAGE),
                output_policy_mode="report").run("judge")
    assert run.status == "completed" and run.output_data == {"ok": 1, "reason": "x"}
    assert not run.audit.clean and run.audit.violations[0].rule == "output_schema"


@tool(terminal=True)
def submit_verdict(ok: bool) -> dict:
    """Submit the verdict; ends the turn."""
    return {"ok": ok}


def test_a_terminal_tool_result_is_the_applications_output_and_not_checked():
    run = agent(call("submit_verdict", ok=True, usage=USAGE), tools=[submit_verdict]).run("judge")
    assert run.status == "completed", run.error
