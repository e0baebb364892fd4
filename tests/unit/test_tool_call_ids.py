"""Duplicate, reused and over-long tool-call ids and names from the model (issue 10, item 1).

Local OpenAI-compatible servers send two calls with one id, or reuse ``call_0`` in a later
response. Each such call gets a readable tool error under an id of its own, so the transcript
stays valid for the provider (P11) and nothing hits the unique (turn, tool_call_id) constraint.
An id or a name longer than its column (200 characters) is bounded the same way on SQLite and
PostgreSQL (where it raised DataError): the id is replaced, the name becomes an unknown-tool
error the model reads.
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from tests.dispatch import override_turnkit
from tests.unstorable import CASES, TOO_LONG, run_case
from turnkit_django import Agent, ConfigurationError, reconcile, services, tool
from turnkit_django.base import failpoints
from turnkit_django.messages import CALL_FIELD_LENGTH, ToolCallPart, distinct_call_ids, load_parts
from turnkit_django.models import Message, ToolExecution, Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]

ran: list[str] = []


@tool
def lookup(ctx, order_id: str) -> dict:
    """Look an order up."""
    ran.append(order_id)
    return {"order_id": order_id}


@pytest.fixture(autouse=True)
def _clear() -> None:
    ran.clear()


def results(turn_id: str) -> dict[str, dict]:
    out = {}
    for message in Message.objects.filter(turn_id=turn_id, kind="tool_result"):
        for part in load_parts(message.content):
            out[part.tool_call_id] = {"is_error": part.is_error, "content": part.content}
    return out


def calls_of(turn_id: str) -> list[tuple[str, str | None]]:
    return [(part.id, part.duplicate_of)
            for message in Message.objects.filter(turn_id=turn_id, kind="tool_call")
            .order_by("sequence") for part in load_parts(message.content)]


def test_two_calls_sharing_an_id_run_the_first_and_give_the_second_a_readable_error():
    client = ScriptedClient([[call("lookup", id="dup", order_id="1"),
                              call("lookup", id="dup", order_id="2")], reply("done")])
    run = Agent("dups", tools=[lookup], client=client).run("go")

    assert run.status == "completed", run.error
    assert ran == ["1"]
    (first, _), (second, original) = calls_of(run.id)
    assert first == "dup" and second != "dup" and original == "dup"
    found = results(run.id)
    assert found[first]["is_error"] is False
    assert found[second]["is_error"] is True
    assert found[second]["content"]["error"] == "duplicate_tool_call_id"
    assert "'dup'" in found[second]["content"]["message"]
    # The model's next request answers both calls, each under its own id.
    answered = [r.tool_call_id for m in client.requests[1].messages for r in m.tool_results]
    assert answered == [first, second]


def test_a_later_response_reusing_an_earlier_id_runs_under_an_id_of_its_own():
    """Servers that number each response's calls send ``call_0`` in every response: the call
    is unambiguous within its response, so it runs, renamed (not an IntegrityError, and not a
    refusal the model could never avoid)."""
    client = ScriptedClient([call("lookup", id="call_0", order_id="1"),
                             call("lookup", id="call_0", order_id="2"), reply("done")])
    run = Agent("reuser", tools=[lookup], client=client).run("go")

    assert run.status == "completed", run.error
    assert ran == ["1", "2"]
    (first, _), (reused, original) = calls_of(run.id)
    assert first == "call_0" and reused != "call_0" and original is None
    found = results(run.id)
    assert found[reused]["is_error"] is False
    assert found[reused]["content"] == {"order_id": "2"}
    assert ToolExecution.objects.filter(turn_id=run.id).count() == 2
    answered = [r.tool_call_id for m in client.requests[2].messages for r in m.tool_results]
    assert answered == [first, reused]


def test_every_later_turn_reusing_call_0_runs_its_tool():
    agent = Agent("numbering", tools=[lookup], client=FunctionClient(
        lambda request: reply("done") if request.last_message_is_tool_result()
        else call("lookup", id="call_0", order_id=str(len(ran)))))
    conversation = agent.conversation()
    for _ in range(3):
        assert conversation.ask("again").status == "completed"
    assert ran == ["0", "1", "2"]


def test_a_reused_id_repeated_within_its_response_is_still_refused():
    client = ScriptedClient([call("lookup", id="call_0", order_id="1"),
                             [call("lookup", id="call_0", order_id="2"),
                              call("lookup", id="call_0", order_id="3")], reply("done")])
    run = Agent("reuser-twice", tools=[lookup], client=client).run("go")

    assert run.status == "completed", run.error
    assert ran == ["1", "2"]
    assert [original for _, original in calls_of(run.id)] == [None, None, "call_0"]


def test_a_turn_failing_before_its_duplicate_calls_started_repairs_its_transcript():
    """Out of money during the model call: the batch never starts, repair closes every call."""
    client = ScriptedClient([[call("lookup", id="d", order_id="1"),
                              call("lookup", id="d", order_id="2"),
                              call("lookup", id="d", order_id="3")]])
    agent = Agent("broke", tools=[lookup], client=client, max_spend=Decimal("0.0000001"))
    with override_turnkit(COST_RATES={"scripted": {"input": "3", "output": "15"}}):
        run = agent.run("go")

    assert run.status == "failed" and run.error["limit"] == "max_spend"
    assert ran == []
    ids = [call_id for call_id, _ in calls_of(run.id)]
    assert len(set(ids)) == 3 and set(results(run.id)) == set(ids)


def test_cancel_and_reconcile_close_duplicate_calls_of_a_background_turn(registered):
    client = FunctionClient(lambda request: [call("lookup", id="same", order_id="1"),
                                             call("lookup", id="same", order_id="2")])
    agent = registered(Agent("bg_dups", tools=[lookup], client=client))
    run = agent.submit("go")
    failpoints.arm("after_model_commit")
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(run.id, kind="test")
    run.cancel()
    assert run.refresh().status == "cancelled"
    ids = [call_id for call_id, _ in calls_of(run.id)]
    assert len(set(ids)) == 2 and set(results(run.id)) == set(ids)
    assert Turn.objects.get(pk=run.id).status == "cancelled"
    assert reconcile().recovered == []


@pytest.mark.parametrize("name", TOO_LONG)
def test_an_over_long_name_or_id_gives_the_same_result_inline_and_in_the_background(
        name, registered):
    """As on PostgreSQL (tests/integration/test_unstorable_values.py): not a DataError, and a
    background turn is not asked again after every lease expiry until it is dead-lettered."""
    run_case(CASES[name])
    run_case(CASES[name], registered)


def test_the_model_reads_why_an_over_long_tool_name_was_refused():
    client = ScriptedClient([call("lookup" + "z" * 300, id="c1", order_id="1"), reply("done")])
    run = Agent("long-name", tools=[lookup], client=client).run("go")

    assert run.status == "completed", run.error
    assert ran == []
    [execution] = ToolExecution.objects.filter(turn_id=run.id)
    assert execution.tool_name == ("lookup" + "z" * 300)[:CALL_FIELD_LENGTH]
    [answer] = [r for m in client.requests[1].messages for r in m.tool_results]
    assert answer.tool_call_id == "c1" and answer.is_error
    assert answer.content["error"] == "unknown_tool"
    message = answer.content["message"]
    assert "at most 64 characters" in message and "Available tools: lookup." in message
    assert len(message) < 200  # the name is shown cut short


def test_over_long_ids_are_replaced_like_duplicates_and_stay_distinct():
    long = "call-" + "9" * 300
    parts = distinct_call_ids([ToolCallPart(long, "a"), ToolCallPart(long, "b"),
                               ToolCallPart("x" * CALL_FIELD_LENGTH, "c")], taken=())
    first, second, third = parts
    assert isinstance(first, ToolCallPart) and isinstance(second, ToolCallPart)
    assert first.id != second.id and len(first.id) <= 64 and len(second.id) <= 64
    assert first.duplicate_of is None and second.duplicate_of == long  # still refused
    assert third == ToolCallPart("x" * CALL_FIELD_LENGTH, "c")  # fits: kept as given


@pytest.mark.parametrize("name", ["a" * 65, "a" * 201, "lookup\n"])
def test_a_tool_name_no_provider_accepts_is_refused_when_the_tool_is_built(name):
    with pytest.raises(ConfigurationError, match="provider limit"):
        @tool(name=name)
        def anything() -> str:
            """Anything."""
            return ""


@pytest.mark.parametrize(("first", "second"), [("a\x00", "a\ufffd"), ("a\ud800", "a\udc00")],
                         ids=["nul", "surrogates"])
def test_ids_the_database_keeps_alike_are_not_distinct(first, second):
    """Stored, a NUL and a lone surrogate become U+FFFD: both calls ran, but the second one's
    result was lost under the first one's id (I3: the id reused, a call without a result)."""
    agent = Agent("ids_alike", tools=[lookup], client=ScriptedClient([
        [call("lookup", id=first, order_id="1"), call("lookup", id=second, order_id="2")],
        reply("done"),
    ]))
    run = agent.run("go")
    assert (run.status, ran) == ("completed", ["1", "2"])
    [(id_a, _), (id_b, _)] = calls_of(run.id)
    assert id_a == "a\ufffd" and id_b != id_a
    assert set(results(run.id)) == {id_a, id_b}
    parts = distinct_call_ids([ToolCallPart(first, "lookup"), ToolCallPart(second, "lookup")],
                              ())
    assert [p.id for p in parts] == [id_a, id_b]
    assert [p.duplicate_of for p in parts] == [None, None]  # the model's ids differed


def test_arguments_nested_deeper_than_the_store_writes_are_a_tool_error():
    """300 levels parse from the wire, but the transcript's serializer refused them: the turn
    failed with 'Maximum serialization depth exceeded'."""
    nested: dict = {}
    for _ in range(300):
        nested = {"a": nested}
    agent = Agent("ids_deep", tools=[lookup], client=ScriptedClient([
        call("lookup", id="c1", order_id="1", extra=nested), reply("done"),
    ]))
    run = agent.run("go")
    assert (run.status, ran) == ("completed", [])
    [result] = results(run.id).values()
    assert result["is_error"] and result["content"]["error"] == "invalid_arguments"
    assert "64 levels" in result["content"]["message"]
