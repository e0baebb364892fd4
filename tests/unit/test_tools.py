"""Tool failures reach the model as tool results (issue 2, done-when 5).

Whatever goes wrong with a call (invalid arguments, ``ToolError``, any other exception in tool
code, arguments that are not JSON, an unknown tool) the model's next request ends with exactly
one tool result for it, marked ``is_error``, readable enough to correct the call; the turn goes on.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnkit_django import Agent, ToolError, tool
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

ran: list[int] = []


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


@tool
def lookup(order_id: int) -> dict:
    """Look an order up."""
    ran.append(order_id)
    return {"order_id": order_id, "status": "shipped"}


@tool
def refund(order_id: int) -> str:
    """Refund an order."""
    ran.append(order_id)
    raise ToolError(f"order {order_id} was already refunded")


@tool
def cancel(order_id: int) -> str:
    """Cancel an order."""
    ran.append(order_id)
    raise RuntimeError("the order service is down")


def invalid(field: str, problem: str) -> dict[str, Any]:
    """Invalid arguments: which field, and a fragment of pydantic's explanation."""
    return {"error": "invalid_arguments", "problems": [{"field": field, "problem": problem}]}


def matches(content: dict[str, Any], expected: dict[str, Any]) -> bool:
    problems = expected.get("problems")
    if problems is not None:
        got = content.get("problems") or []
        if [p["field"] for p in got] != [p["field"] for p in problems] or not all(
                want["problem"] in have["problem"] for want, have in zip(problems, got,
                                                                          strict=True)):
            return False
        assert "fix them and call again" in content["message"]
    return all(content.get(k) == v for k, v in expected.items() if k != "problems")


CASES = {
    # name: (the call, what the model reads (a subset of the result), whether the tool ran)
    "valid": (call("lookup", order_id=42), {"order_id": 42, "status": "shipped"}, True),
    "wrong type": (call("lookup", order_id="forty-two"),
                   invalid("order_id", "valid integer"), False),
    "missing argument": (call("lookup"), invalid("order_id", "Field required"), False),
    "unexpected argument": (call("lookup", order_id=1, note="x"),
                            invalid("note", "Extra inputs"), False),
    "ToolError": (call("refund", order_id=7),
                  {"error": "ToolError", "message": "order 7 was already refunded"}, True),
    "other exception": (call("cancel", order_id=7),
                        {"error": "RuntimeError", "message": "the order service is down"}, True),
    "malformed JSON": (call("lookup", raw_arguments="{not json"),
                       {"error": "invalid_arguments",
                        "message": "The arguments for 'lookup' are not a JSON object nested at "
                                   "most 64 levels deep; send a JSON object matching the "
                                   "tool's schema."}, False),
    "unknown tool": (call("delete_everything", order_id=7),
                     {"error": "unknown_tool",
                      "message": "There is no tool named 'delete_everything'. Available tools: "
                                 "cancel, lookup, refund."}, False),
}


@pytest.mark.parametrize("case", list(CASES))
def test_a_tool_failure_is_a_tool_result_the_model_reads(case, valid_transcript):
    the_call, expected, runs = CASES[case]
    client = ScriptedClient([the_call, reply("I read the result")])
    agent = Agent("clerk", tools=[lookup, refund, cancel], client=client)
    run = agent.run("handle order 7")

    assert run.status == "completed", run.error
    assert run.output_text == "I read the result"
    message = client.requests[1].messages[-1]
    assert message.role == "tool"
    (result,) = message.tool_results
    (asked,) = client.requests[1].messages[-2].tool_calls
    assert result.tool_call_id == asked.id
    assert result.name == the_call.name
    assert result.is_error is (case != "valid")
    assert matches(result.content, expected), result.content
    assert bool(ran) is runs
    execution = run.tool_executions().get()
    assert execution.status == ("completed" if case == "valid" else "failed")
    assert (execution.result if case == "valid" else execution.error) == result.content
    valid_transcript(run.conversation_id)
