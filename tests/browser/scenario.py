"""The operations-console scenario shared by the admin tests (client and browser).

* :func:`finished_run`: an inline support run that looks an order up (a result), checks stock
  (a failed tool), asks the writer sub-agent for a note (a nested transcript) and closes the
  ticket with a terminal tool, which leaves the call after it "not executed".
* :func:`active_tree`: a background run that fanned out to two sub-agents; the charger's worker
  died inside ``charge_card`` (the call is still ``running``, so a cancel makes its outcome
  unknown) and the writer has not started. Needs the recording dispatcher (tests.dispatch) and
  the agents registered (:func:`register_agents`).
"""

from __future__ import annotations

import pytest

from tests.browser.scenario_rates import RATES
from tests.orchestration import crash_at, scripted
from turnkit_django import Agent, ToolError, services, tool
from turnkit_django.agents.registry import register, unregister
from turnkit_django.api.handles import Run
from turnkit_django.base import failpoints
from turnkit_django.testing import FunctionClient, call, reply


@tool
def lookup_order(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id, "status": "delivered", "item": "teapot", "total_cents": 1999}


@tool
def check_stock(sku: str) -> dict:
    """Check the warehouse stock of an item."""
    raise ToolError(f"the warehouse is offline; stock of {sku} unknown")


@tool(terminal=True)
def close_ticket(ticket: int) -> str:
    """Close the support ticket. Ends the turn."""
    return f"Ticket {ticket} closed: refund issued, apology sent."


@tool
def notify(channel: str) -> str:
    """Notify the customer."""
    return f"sent by {channel}"


@tool
def charge_card(order_id: str, amount_cents: int) -> dict:
    """Charge the customer's card."""
    return {"order_id": order_id, "charged_cents": amount_cents}


writer = Agent("console_writer", description="Drafts customer notes.", client=FunctionClient(
    scripted(reply("Dear customer, we are sorry the teapot arrived broken.\n"
                   "A full refund of $19.99 is on its way."))))
charger = Agent("console_charger", description="Charges cards.", tools=[charge_card],
                client=FunctionClient(scripted(call("charge_card", order_id="42",
                                                    amount_cents=1999))))
support = Agent(
    "console_support", instructions="Help with orders.",
    tools=[lookup_order, check_stock, close_ticket, notify], sub_agents=[writer],
    client=FunctionClient(scripted(
        call("lookup_order", order_id="42"),
        call("check_stock", sku="TEA-1"),
        call("console_writer", task="Draft an apology for the broken teapot."),
        [call("close_ticket", ticket=42), call("notify", channel="email")],
    )))
dispatcher = Agent(
    "console_dispatch", instructions="Charge, then confirm.", sub_agents=[charger, writer],
    client=FunctionClient(scripted([
        call("console_charger", task="Charge order 42: $19.99."),
        call("console_writer", task="Draft the receipt for order 42."),
    ])))

AGENTS = (support, dispatcher)
__all__ = ["RATES", "active_tree", "console_agents", "finished_run", "register_agents",
           "unregister_agents"]


def register_agents() -> None:
    for agent in AGENTS:
        register(agent)


def unregister_agents() -> None:
    for agent in AGENTS:
        for name in [agent.name, *(a.name for a in agent.reachable_agents())]:
            unregister(name)


@pytest.fixture
def console_agents():
    register_agents()
    yield
    unregister_agents()


def finished_run() -> Run:
    """The inline support run (completed, with a sub-agent)."""
    return support.run("Refund order 42: the teapot arrived broken.",
                       principal={"user": 7, "tenant": "acme"})


def active_tree() -> Run:
    """A waiting root with a charger child stuck in ``charge_card`` and a pending writer."""
    run = Run.create(dispatcher, "Charge order 42 and send the receipt.",
                     principal={"user": 7, "tenant": "acme"}).submit()
    services.run_turn(run.id, kind="test")  # the fan-out: two children, the root waits
    charger_turn = run.turns().get(agent_name="console_charger")
    crash_at("inside_tool")
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(charger_turn.pk, kind="test")
    failpoints.disarm_all()
    return run.refresh()
