"""Compiled reads (store.compiled) read exactly what the queryset they were built from reads."""

from __future__ import annotations

import pytest
from django.db import transaction

from turnkit_django import Agent
from turnkit_django.models import Message, Turn
from turnkit_django.store.compiled import CompiledRead
from turnkit_django.store.locks import lock_tree, lock_tree_of
from turnkit_django.store.transcript import _VISIBLE
from turnkit_django.testing import ScriptedClient, reply

pytestmark = pytest.mark.django_db


def test_a_compiled_read_converts_rows_as_the_orm_does():
    run = Agent("compiled", client=ScriptedClient([reply("done")])).run("hello")
    fields = ("pk", "usage", "completed_at", "cost", "options", "status")
    read = CompiledRead(lambda pk: Turn.objects.filter(pk=pk).values_list(*fields), 1)

    assert read.rows(run.id) == list(Turn.objects.filter(pk=run.id).values_list(*fields))
    assert read.rows("turn_missing") == []  # the same SQL, other values


def test_the_tree_lock_reads_the_ledger_the_orm_reads():
    run = Agent("compiled_lock", client=ScriptedClient([reply("done")])).run("hello")
    with transaction.atomic():
        by_root, by_turn = lock_tree(run.id), lock_tree_of(run.id)
    row = Turn.objects.get(pk=run.id)
    assert (by_root.fence, by_root.status, by_root.tool_counts, by_root.spend) == (
        row.fence, row.status, row.tree_tool_counts, row.tree_spend)
    assert by_turn is not None and by_turn.root_id == run.id and by_turn.fence == row.fence
    assert lock_tree_of("turn_missing") is None
    with pytest.raises(Turn.DoesNotExist), transaction.atomic():
        lock_tree("turn_missing")


def test_a_value_the_orm_would_transform_is_refused_when_compiled():
    read = CompiledRead(lambda text: Turn.objects.filter(agent_name__contains=text)
                        .values_list("pk"), 1)
    with pytest.raises(ValueError, match="transformed"):
        read.rows("x")


def test_a_value_the_read_does_not_use_is_refused():
    read = CompiledRead(lambda _: Turn.objects.values_list("pk"), 1)
    with pytest.raises(ValueError, match="each of its values"):
        read.rows("x")


@pytest.mark.parametrize("after", [0, 2])
def test_the_transcript_read_returns_what_visible_to_returns(after):
    conversation = Agent("compiled_transcript", client=ScriptedClient(
        [reply("one"), reply("two")])).conversation()
    conversation.ask("first")
    turn = Turn.objects.get(pk=conversation.ask("second").id)
    expected = [(m.role, m.content, m.kind, m.sequence, m.metadata) for m in
                Message.objects.visible_to(turn).filter(sequence__gt=after)]
    assert len(expected) == 4 - after
    assert _VISIBLE.rows(turn.conversation_id, turn.context_sequence, turn.pk, after) == expected
