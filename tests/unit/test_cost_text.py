"""Costs in event payloads and tool results are fixed-point decimal strings, as documented
(docs/reference/events.md): ``str(Decimal)`` wrote a cost column's zero as ``"0E-8"`` and a
hundred-millionth of a dollar as ``"1E-8"``."""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.dispatch import override_turnkit
from turnkit_django import Agent, tool
from turnkit_django.clients.media import ImageResult, MediaAnalysis
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

#: A hundred-millionth of a dollar per input token, the smallest cost a cost column keeps.
PRICED = "tiny-rate-model"
RATES = {PRICED: {"input": "0.01", "output": "0"}}


@tool
def noop() -> str:
    """Do nothing."""
    return "ok"


def test_model_completed_writes_its_cost_in_fixed_point(django_capture_on_commit_callbacks):
    agent = Agent("tiny_costs", model=PRICED, tools=[noop], client=ScriptedClient([
        call("noop", usage={"input_tokens": 0, "output_tokens": 0}),
        reply("done", usage={"input_tokens": 1, "output_tokens": 0})]))
    seen: list = []
    with override_turnkit(COST_RATES=RATES), django_capture_on_commit_callbacks(execute=True):
        run = agent.run("go", on_event=seen.append)
    assert run.cost == Decimal("0.00000001")
    costs = [e.payload["cost"] for e in seen if e.type == "model.completed"]
    assert costs == ["0.00000000", "0.00000001"]


def test_media_tool_results_write_their_cost_in_fixed_point():
    analysis = MediaAnalysis("a cat", cost=Decimal("1E-8"))
    assert analysis.summary()["cost"] == "0.00000001"
    image = ImageResult((), model=PRICED, cost=Decimal("0E-8"))
    assert image.summary()["cost"] == "0.00000000"
