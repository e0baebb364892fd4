"""Compiled updates (store.compiled) write exactly what the queryset update they were built
from writes, and the start of a call is one compiled once per process."""

from __future__ import annotations

from unittest import mock

import pytest
from django.db import connection
from django.db.models.functions import Now
from django.db.models.sql.compiler import SQLUpdateCompiler

from turnkit_django import Agent, tool
from turnkit_django.base.states import ToolStatus
from turnkit_django.models import Conversation, ToolExecution, Turn
from turnkit_django.store.compiled import CompiledUpdate
from turnkit_django.testing import ScriptedClient, call, reply

pytestmark = pytest.mark.django_db


@tool
def compiled_probe(n: int) -> dict[str, int]:
    """Return its input."""
    return {"n": n}


def _agent(name: str) -> Agent:
    return Agent(name, tools=[compiled_probe], client=ScriptedClient(
        [call("compiled_probe", n=1), reply("done")]))


def test_a_compiled_update_writes_what_the_queryset_update_writes():
    run = Agent("compiled_update", client=ScriptedClient([reply("done")])).run("hello")
    fence = Turn.objects.values_list("fence", flat=True).get(pk=run.id)
    update = CompiledUpdate(lambda pk, fence: Turn.objects.filter(pk=pk, fence=fence),
                            {"model": "marked", "updated_at": Now()}, 2, ints=(1,))

    assert update.execute("turn_missing", fence) == 0
    assert update.execute(run.id, fence + 1) == 0  # the same SQL, other values
    assert update.execute(run.id, fence) == 1
    assert Turn.objects.values_list("model", flat=True).get(pk=run.id) == "marked"


def test_a_value_a_compiled_update_does_not_use_is_refused():
    update = CompiledUpdate(lambda _: Turn.objects.all(), {"model": "x"})
    with pytest.raises(ValueError, match="each of its values"):
        update.execute("x")


def test_the_start_of_a_call_is_not_compiled_again_at_each_call():
    _agent("compiled_start_warm").run("first")  # compiles what this process compiles once
    with mock.patch.object(SQLUpdateCompiler, "as_sql", autospec=True,
                           side_effect=SQLUpdateCompiler.as_sql) as compiled:
        run = _agent("compiled_start").run("second")

    assert run.status == "completed"
    execution = ToolExecution.objects.get(turn_id=run.id)
    assert execution.status == ToolStatus.COMPLETED and execution.started_at is not None
    started = [c for c in compiled.call_args_list
               if any(field.name == "started_at" for field, _, _ in c.args[0].query.values)]
    assert started == []


#: The ORM updates a warm inline turn of model, tool, model still compiles, each a statement
#: whose shape varies with the step, so there is no one statement to compile: the turn's state
#: with whatever charge and ledger delta the step brings (JSON values, a field set per step),
#: the move of a call's execution (its fields per outcome) and the ORM's transition (its fields
#: per transition). All are the path SQLite always takes (the locked one, ``Fenced.atomic``); on
#: PostgreSQL a step is one statement built by store.steps and a warm turn compiles none.
_VARIES_WITH_THE_STEP = {
    ("turnkit_turn", ("state", "usage", "cost_unknown", "tree_tool_executions",
                      "tree_tool_counts")),
    ("turnkit_toolexecution", ("status", "fence", "updated_at", "completed_at", "result")),
    ("turnkit_turn", ("state", "tree_iterations")),
    ("turnkit_turn", ("status", "updated_at", "state", "output_text", "output_data",
                      "completed_at", "fence", "claimed_by", "usage", "cost_unknown")),
}


def test_a_warm_inline_turn_compiles_only_the_updates_whose_shape_varies():
    _agent("compiled_inline_warm").run("first")
    with mock.patch.object(SQLUpdateCompiler, "as_sql", autospec=True,
                           side_effect=SQLUpdateCompiler.as_sql) as compiled:
        run = _agent("compiled_inline").run("second")

    assert run.status == "completed"
    updates = [(c.args[0].query.model._meta.db_table,
                tuple(field.name for field, _, _ in c.args[0].query.values))
               for c in compiled.call_args_list]
    expected = set() if connection.vendor == "postgresql" else _VARIES_WITH_THE_STEP
    assert sorted(updates) == sorted(expected)
    assert Conversation.objects.get(pk=run.conversation_id).updated_at >= Turn.objects.get(
        pk=run.id).completed_at
