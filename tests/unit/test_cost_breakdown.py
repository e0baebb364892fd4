"""Cost breakdowns (issue 16): thinking-token totals, ``run.cost_breakdown()`` per model and
per turn, the ``COST_CALCULATOR`` setting, and "cost unknown" as soon as a part is unknown."""

from __future__ import annotations

import logging
from decimal import Decimal
from typing import Any

import pytest

from tests.dispatch import override_turnkit
from turnkit_django import Agent, load_turn, tool
from turnkit_django.clients import ModelResponse, Usage
from turnkit_django.clients.cost import compute_cost
from turnkit_django.messages import TextPart, ToolCallPart
from turnkit_django.models import Turn
from turnkit_django.store.limits import MAX_COST, SPEND_UNRECORDABLE
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

RATES = {"lead-model": {"input": "1000000", "output": "0"},           # $1 an input token
         "child-model": {"input": "0", "output": "2000000"},          # $2 an output token
         "thinker": {"input": "0", "output": "1000000", "thinking": "3000000"}}


def tokens(inputs: int = 0, outputs: int = 0, thinking: int = 0) -> dict[str, int]:
    return {"input_tokens": inputs, "output_tokens": outputs, "thinking_tokens": thinking}


def tree(child_model: str = "child-model") -> Any:
    child = Agent("helper", model=child_model, client=ScriptedClient(
        [reply("half", usage=tokens(outputs=1))]))
    lead = Agent("lead", model="lead-model", sub_agents=[child], client=ScriptedClient(
        [call("helper", task="do half", usage=tokens(inputs=2)),
         reply("all done", usage=tokens(inputs=3))]))
    return lead.run("do it")


def test_a_run_breaks_its_cost_down_per_model_and_per_turn():
    with override_turnkit(COST_RATES=RATES):
        run = tree()

    breakdown = run.cost_breakdown()
    assert breakdown.cost == run.cost == Decimal(7) and not breakdown.unknown
    lead, child = breakdown.by_model["lead-model"], breakdown.by_model["child-model"]
    assert (lead.calls, lead.usage.input_tokens, lead.cost) == (2, 5, Decimal(5))
    assert (child.calls, child.usage.output_tokens, child.cost) == (1, 1, Decimal(2))
    root, helper = breakdown.by_turn
    assert (root.turn_id, root.agent, root.depth, root.cost) == (run.id, "lead", 0, Decimal(5))
    assert (helper.agent, helper.depth, helper.parent_turn_id) == ("helper", 1, run.id)
    assert helper.by_model["child-model"].cost == Decimal(2)
    assert breakdown.as_dict()["by_model"]["lead-model"]["cost"] == "5.00000000"
    # A turn's own breakdown is its part of the tree's.
    assert load_turn(helper.turn_id).cost_breakdown().by_turn == (helper,)
    assert list(run.turns().get(depth=1).usage["by_model"]) == ["child-model"]


def test_one_unpriced_part_makes_the_cost_unknown_and_keeps_the_known_subtotal():
    with override_turnkit(COST_RATES=RATES):
        run = tree(child_model="nobody-prices-this")

    breakdown = run.cost_breakdown()
    assert run.cost is None and breakdown.cost is None and breakdown.unknown
    assert breakdown.known_cost == Decimal(5)
    assert breakdown.by_model["nobody-prices-this"].cost is None
    assert breakdown.by_model["lead-model"].cost == Decimal(5)


def test_thinking_tokens_are_totalled_and_priced_at_their_own_rate_when_there_is_one():
    client = ScriptedClient([reply("deep", usage=tokens(outputs=10, thinking=4)),
                             reply("deeper", usage=tokens(outputs=5, thinking=5))])
    conv = Agent("thinker", model="thinker", client=client).conversation()
    with override_turnkit(COST_RATES=RATES):
        first, second = conv.ask("one"), conv.ask("two")

    assert first.usage == Usage(output_tokens=10, thinking_tokens=4)
    assert first.cost == Decimal(6 + 12)  # 6 plain output tokens at $1, 4 thinking at $3
    assert second.cost == Decimal(15)
    assert first.usage.total_tokens == 10  # thinking is a part of the output
    assert first.cost_breakdown().thinking_tokens == 4
    # Without a thinking rate, thinking costs what output costs.
    assert compute_cost("child-model", Usage(output_tokens=3, thinking_tokens=2)) is None
    with override_turnkit(COST_RATES=RATES):
        assert compute_cost("child-model", Usage(output_tokens=3, thinking_tokens=2)) == 6


def calculator(usage: Usage, model: str) -> Any:
    return {"lead-model": "0.25", "free": 0}.get(model)


def test_a_cost_calculator_prices_calls_before_the_rates(caplog):
    with override_turnkit(COST_RATES=RATES,
                          COST_CALCULATOR="tests.unit.test_cost_breakdown.calculator"):
        run = tree()
        assert compute_cost("free", Usage(input_tokens=9)) == 0
        assert compute_cost("lead-model", Usage(), reported="0.5") == Decimal("0.5")

    # The calculator priced the lead's calls; None sent the child's to the rates.
    assert run.cost_breakdown().by_model["lead-model"].cost == Decimal("0.5")
    assert run.cost == Decimal("2.5")


@pytest.mark.parametrize("answer", [ValueError("no price list"), "cheap", -1, True])
def test_a_calculator_that_fails_makes_the_cost_unknown_and_says_why(answer, caplog):
    def broken(usage: Usage, model: str) -> Any:
        if isinstance(answer, Exception):
            raise answer
        return answer

    caplog.set_level(logging.ERROR, logger="turnkit_django.cost")
    with override_turnkit(COST_CALCULATOR=broken):
        run = Agent("lead", client=ScriptedClient([ModelResponse((TextPart("hi"),),
                                                                 Usage(1, 1))])).run("go")

    assert run.status == "completed" and run.cost is None
    assert "COST_CALCULATOR" in caplog.text


def test_a_conversation_and_an_agent_add_up_their_own_turns():
    client = ScriptedClient([reply("a", usage=tokens(inputs=1)),
                             reply("b", usage=tokens(inputs=2))])
    agent = Agent("counter", model="lead-model", client=client)
    with override_turnkit(COST_RATES=RATES):
        conv = agent.conversation()
        conv.ask("one")
        conv.ask("two")
        other = tree()  # another agent's run does not count

    assert conv.cost_breakdown().cost == Decimal(3)
    assert [t.agent for t in conv.cost_breakdown().by_turn] == ["counter", "counter"]
    assert agent.cost_breakdown().by_model["lead-model"].calls == 2
    assert Agent("helper").cost_breakdown().cost == Decimal(2) == other.cost - 5


@tool
def ping() -> str:
    """Answer pong."""
    return "pong"


def absurd(text: str = "", *calls: str, cost: str = "1e30") -> ModelResponse:
    """A response whose provider reports a cost no cost column can hold."""
    parts = (TextPart(text), *(ToolCallPart(f"call_{name}", name) for name in calls))
    return ModelResponse(parts, Usage(1, 1), reported_cost=cost)


def test_a_cost_too_large_to_record_ends_the_run_with_a_readable_ledger(caplog):
    """It used to be stored (tree_spend 8.2e15 on SQLite, a DataError on PostgreSQL): the run
    raised decimal.InvalidOperation and the admin's turn list answered 500 until fixed by hand."""
    caplog.set_level(logging.ERROR, logger="turnkit_django.cost")
    agent = Agent("spender", tools=[ping], client=ScriptedClient(
        [absurd("", "ping"), reply("never asked")]))
    run = agent.run("go")

    assert run.status == "failed"
    assert run.error["type"] == "BudgetExceeded" and run.error["message"] == SPEND_UNRECORDABLE
    assert run.error["limit"] == "max_spend"
    assert run.cost is None  # the call's cost is unknown, not a wrong number
    root = Turn.objects.get(pk=run.id)
    assert root.tree_spend == MAX_COST and root.cost == 0 and root.cost_unknown
    assert not run.tool_executions().filter(status="completed").exists()  # ping never ran
    assert "past 1000000000 USD, the most a run can record" in caplog.text


def test_charges_that_add_up_past_a_cost_column_stop_at_its_ceiling():
    with override_turnkit(COST_RATES={"m": {"input": "1e14", "output": "0"}}):  # not checked
        agent = Agent("spender", model="m", tools=[ping], client=ScriptedClient(
            [call("ping", usage=tokens(inputs=1)), reply("done", usage=tokens(inputs=82))]))
        run = agent.run("go")

    # The first call (1e8 USD) is recorded; the second (8.2e9) would pass the ceiling.
    assert run.status == "completed" and run.output_text == "done"
    assert run.cost is None
    root = Turn.objects.get(pk=run.id)
    assert root.tree_spend == MAX_COST and root.cost == Decimal("1e8")
    assert root.usage["by_model"]["m"]["cost_unknown"] is True
