"""What one step of the loop costs in SQL (architecture section 12; ``make bench`` prints the same).

One commit per step: a model step commits its response together with what follows it (the first
tool call's intent, or the publication), a tool call commits its result together with the next
call's intent or the end of the batch (the move to the model phase with the next iteration
reserved). A regression adding a read, a lock or a transaction to a step fails here.
"""

from __future__ import annotations

import pytest

from tests.stepcost import Span, TurnCost, measure
from turnkit_django import Agent, tool
from turnkit_django.testing import FunctionClient, ScriptedClient, call, reply

# Real commits: events fire on commit, and each step's COMMIT is counted.
pytestmark = pytest.mark.django_db(transaction=True)

#: Statements per step, locks included, BEGIN/COMMIT not counted (the targets of section 12 are
#: at most 6 per model step and 4 per tool call; a tool call costs 5 today: the tree lock, the
#: execution's compare-and-set, the sequence allocation, the result message, and the turn's
#: state or the next call's intent), plus the durable ``message.created`` event row written in
#: the step's transaction (on PostgreSQL's fast path it is a CTE of the step's one statement:
#: tests/integration/test_fast_path.py).
#: A tool that is not replay-safe (``probe`` here) adds one statement, outside the step's
#: transaction: its start, recorded just before it runs, so a call whose worker died before it
#: provably never ran (recovery runs it instead of reporting "outcome unknown").
MODEL_STEP = 6
#: The model step that publishes the answer also deletes the turn's lease (a finished turn keeps
#: none, so reconcile's expired-lease query reads live leases only); on PostgreSQL's fast path it
#: is a CTE of the step's one statement.
PUBLISHING_STEP = MODEL_STEP + 1
TOOL_CALL = 6 + 1
TOOL_CALL_STARTING_THE_NEXT = 7 + 1  # + the next call's intent row


@tool
def probe(n: int) -> dict:
    """Return its input."""
    return {"n": n}


def five_steps(request):  # model, tool, model, tool, model
    done = sum(1 for m in request.messages if m.role == "tool")
    return call("probe", n=done) if done < 2 else reply("done")


def run_measured(agent: Agent) -> TurnCost:
    def run(on_event):
        result = agent.run("go", on_event=on_event)
        assert result.status == "completed", result.error

    return measure(run)


def assert_one_commit(spans: list[Span], most: int) -> None:
    for span in spans:
        assert span.commits == 1, span.sql
        assert len(span.statements) <= most, span.statements
        # Incremental: a step never reads the transcript back.
        assert not any(s.startswith("SELECT") and '"turnkit_message"' in s
                       for s in span.statements), span.statements


def test_a_five_step_turn_commits_once_per_step():
    cost = run_measured(Agent("steps", tools=[probe], client=FunctionClient(five_steps)))

    assert [s.kind for s in cost.spans] == ["setup", "model", "tool", "model", "tool", "model"]
    *steps, publishing = cost.of("model")
    assert_one_commit(steps, MODEL_STEP)
    assert_one_commit([publishing], PUBLISHING_STEP)
    assert_one_commit(cost.of("tool"), TOOL_CALL)
    # Creation with the claim (the first iteration reserved), then one commit per step.
    assert cost.commits == 1 + 5
    assert cost.of("setup")[0].commits == 1


def test_a_batch_of_calls_commits_once_per_call():
    script = [[call("probe", n=1), call("probe", n=2), call("probe", n=3)], reply("ok")]
    cost = run_measured(Agent("batch", tools=[probe], client=ScriptedClient(script)))

    assert [s.kind for s in cost.spans] == ["setup", "model", "tool", "tool", "tool", "model"]
    *steps, publishing = cost.of("model")
    assert_one_commit(steps, MODEL_STEP)
    assert_one_commit([publishing], PUBLISHING_STEP)
    first, second, last = cost.of("tool")
    assert_one_commit([first, second], TOOL_CALL_STARTING_THE_NEXT)
    assert_one_commit([last], TOOL_CALL)
    assert cost.commits == 1 + 5
