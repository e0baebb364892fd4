"""Steering a turn whose replay-safe call was reset by recovery: "outcome unknown".

Recovery puts a replay-safe call that was running when its worker died back to ``pending``
(same row, same key) for the resumed turn to run again. It may have taken effect already, so
when steering makes the resumed turn drop it, the model must read "outcome unknown", as a
cancel or a dead-letter of such a call gives (guarantees P5): a "not executed: superseded"
result would invite the model to call the tool again, with a new key, and charge twice.
"""

from __future__ import annotations

import pytest

from tests.unit.test_resume import Ledger, billing_agent, crash, submitted
from turnkit_django import services
from turnkit_django.clients.base import ModelRequest
from turnkit_django.models import ToolExecution
from turnkit_django.testing import call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]


def respond(request: ModelRequest) -> object:
    results = [p for m in request.messages if m.role == "tool" for p in m.tool_results]
    if not results:
        return call("charge", id="call_charge", amount=5)
    if results[-1].content.get("error") == "superseded":
        return call("charge", id="call_again", amount=5)  # the model believes it never ran
    return reply(f"last result: {results[-1].content.get('error')}")


def test_a_reset_replay_safe_call_superseded_by_steering_is_outcome_unknown(
        registered, valid_transcript):
    ledger = Ledger()
    ledger.crash_after_effect = 1
    agent, _ = billing_agent(registered, ledger, recovery="replay_safe", respond=respond)
    run = submitted(agent)
    assert crash(run.id).recovered == [run.id]
    (reset,) = ToolExecution.objects.filter(turn_id=run.id)
    assert (reset.status, reset.attempts) == ("pending", 1)  # it ran once already

    run.steer("Prefer store credit.", key="steer-1")
    assert services.run_turn(run.id, kind="test")

    run.refresh()
    assert run.status == "completed", run.error
    assert run.output_text == "last result: outcome_unknown"
    reset.refresh_from_db()
    assert reset.status == "interrupted"
    assert reset.error["error"] == "outcome_unknown"
    assert ToolExecution.objects.filter(turn_id=run.id).count() == 1
    assert ledger.keys == [reset.idempotency_key]  # one charge
    valid_transcript(run.conversation_id)
