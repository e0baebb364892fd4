import pytest

from turnkit_django import Agent, tool
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = pytest.mark.django_db


@tool
def lookup_order(order_id: str) -> dict:
    """Look up an order."""
    return {"order_id": order_id, "status": "shipped"}


@tool(terminal=True)
def close_ticket(ctx, summary: str) -> str:
    """Close the ticket."""
    return f"closed: {summary}"


def test_run_with_tools_and_subagent():
    writer = Agent("writer", instructions="Write.", description="Writes copy.")
    client = ScriptedClient([
        call("lookup_order", order_id="42"),
        call("writer", task="write a note"),
        reply("a note"),  # the writer's answer
        [call("close_ticket", summary="done"), call("lookup_order", order_id="1")],
    ])
    agent = Agent("support", tools=[lookup_order, close_ticket], sub_agents=[writer],
                  client=client)
    run = agent.run("Refund order 42")
    assert run.status == "completed", run.error
    assert run.output_text == "closed: done"
    msgs = list(run.messages())
    kinds = [(m.role, m.kind) for m in msgs]
    print(kinds)
    statuses = sorted(run.tool_executions().values_list("tool_name", "status"))
    assert ("lookup_order", "cancelled") in statuses
    assert run.turns().count() == 2
