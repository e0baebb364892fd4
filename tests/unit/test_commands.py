"""Management commands: inspect, prune, reconcile, verify."""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import CommandError, call_command
from django.utils import timezone

from turnkit_django import Agent
from turnkit_django.models import Conversation, Message, Turn
from turnkit_django.testing import ScriptedClient, call, reply
from turnkit_django.tools.base import tool

pytestmark = pytest.mark.django_db


@tool
def lookup(order_id: str) -> dict:
    """Look an order up."""
    return {"order_id": order_id}


def finished_run(question: str = "Where is order 7?"):
    writer = Agent("cmd_writer")
    agent = Agent("cmd_support", tools=[lookup], sub_agents=[writer], client=ScriptedClient([
        call("lookup", order_id="7"), call("cmd_writer", task="draft"), reply("draft text"),
        reply("Order 7 shipped."),
    ]))
    return agent.run(question)


def run_command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


def test_inspect_prints_tree_transcript_usage_and_cost():
    run = finished_run()
    child = run.turns().exclude(pk=run.id).get()
    text = run_command("turnkit_inspect", child.pk)
    assert f"▶   cmd_writer {child.pk} completed" in text
    assert "→ lookup(order_id=\"7\")" in text and "Order 7 shipped." in text
    assert "usage" in text and "cost" in text
    conversation_text = run_command("turnkit_inspect", run.conversation_id)
    assert run.id in conversation_text and "Where is order 7?" in conversation_text


def test_inspect_an_unknown_id_says_what_ids_look_like():
    with pytest.raises(CommandError, match="turn_"):
        run_command("turnkit_inspect", "nope")


def test_prune_deletes_only_idle_finished_trees():
    old, recent = finished_run("old"), finished_run("recent")
    pending = Agent("cmd_support").prepare("still to do")
    long_ago = timezone.now() - timedelta(days=40)
    Conversation.objects.filter(pk__in=[old.conversation_id, pending.conversation_id]).update(
        updated_at=long_ago)
    assert "would delete 1" in run_command("turnkit_prune", "--older-than", "30", "--dry-run")
    assert Turn.objects.filter(pk=old.id).exists()
    assert "deleted 1" in run_command("turnkit_prune", "--older-than", "30", "--batch", "1")
    assert not Turn.objects.filter(root_turn_id=old.id).exists()
    assert not Message.objects.filter(conversation_id=old.conversation_id).exists()
    assert Turn.objects.filter(pk=recent.id).exists()
    assert Turn.objects.filter(pk=pending.id).exists()


def test_prune_refuses_a_negative_age():
    with pytest.raises(CommandError, match="older-than"):
        run_command("turnkit_prune", "--older-than", "-1")


def test_reconcile_command_reports_a_pass():
    assert "recovered 0" in run_command("turnkit_reconcile")
