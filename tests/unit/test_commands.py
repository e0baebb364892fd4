"""Management commands: inspect (text, --full, --json, the tree in parent order), prune,
reconcile, verify (unknown ids are refused)."""

from __future__ import annotations

import json
from datetime import timedelta
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command, load_command_class
from django.utils import timezone

from turnkit_django import Agent, services
from turnkit_django.messages import TextPart
from turnkit_django.models import Conversation, Message, Turn
from turnkit_django.testing import ScriptedClient, call, reply
from turnkit_django.tools.tool import tool

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


# ------------------------------------------------------------------ numeric options

DAYS = "--older-than must be a number of days from 0 to 36500"
WHOLE = "must be a whole number from 1 to 2147483647"
SECONDS = "--interval must be a number of seconds above 0 to 315360000"
BAD_NUMBERS = [
    # Used to end in OverflowError / ValueError tracebacks from timedelta().
    (["turnkit_prune", "--older-than", "1e400"], DAYS),
    (["turnkit_prune", "--older-than", "nan"], DAYS),
    (["turnkit_prune", "--older-than", "100000000"], DAYS),
    (["turnkit_prune", "--older-than", "-1"], DAYS),
    (["turnkit_prune", "--older-than", "soon"], DAYS),
    (["turnkit_prune", "--older-than", "30", "--batch", "0"], f"--batch {WHOLE}"),
    (["turnkit_prune", "--older-than", "30", "--batch", "2.5"], f"--batch {WHOLE}"),
    (["turnkit_prune", "--older-than", "30", "--batch", "9" * 400], f"--batch {WHOLE}"),
    # Used to raise OverflowError; 0 was replaced by RECONCILE_INTERVAL; nan was waited on.
    (["turnkit_reconcile", "--loop", "--interval", "inf"], SECONDS),
    (["turnkit_reconcile", "--loop", "--interval", "1e300"], SECONDS),
    (["turnkit_reconcile", "--loop", "--interval", "0"], SECONDS),
    (["turnkit_reconcile", "--loop", "--interval", "nan"], SECONDS),
    (["turnkit_reconcile", "--loop", "--interval", "-1"], SECONDS),
    (["turnkit_reconcile", "--loop", "--passes", "0"], f"--passes {WHOLE}"),
]


@pytest.mark.parametrize(("args", "message"), BAD_NUMBERS,
                         ids=[" ".join(a[1:]) for a, _ in BAD_NUMBERS])
def test_numeric_options_out_of_range_are_refused_with_the_range(args, message):
    with pytest.raises(CommandError) as raised:
        run_command(*args)
    assert message.split(" must ")[0] in str(raised.value)
    assert message.split(" ", 1)[1] in str(raised.value)
    assert repr(args[-1]) in str(raised.value)


@pytest.mark.parametrize(("name", "options", "message"), [
    ("turnkit_reconcile", {"loop": True, "interval": 0}, SECONDS),
    ("turnkit_reconcile", {"loop": True, "passes": 1.5}, f"--passes {WHOLE}"),
    ("turnkit_prune", {"older_than": 30, "batch": 0}, f"--batch {WHOLE}"),
    ("turnkit_prune", {"older_than": float("nan")}, DAYS),
])
def test_numeric_keywords_of_call_command_follow_the_same_rules(name, options, message):
    """call_command does not parse an optional keyword: the command checks it the same way."""
    with pytest.raises(CommandError, match=message.split(" must ")[0]) as raised:
        call_command(name, **options, stdout=StringIO())
    assert message.split(" ", 1)[1] in str(raised.value)


# One wording of a refused number, however the command is called: the command line (argparse
# prints it after the usage and exits with status 2), call_command with command-line arguments
# (argparse raises it as a CommandError), and call_command keywords (argparse does not parse an
# optional keyword; the command checks it and raises the same text). The reference quotes the
# --interval one.
EXACT = [
    ("turnkit_reconcile", ["--loop", "--interval", "0"], {"loop": True, "interval": 0},
     "argument --interval: must be a number of seconds above 0 to 315360000; got '0'"),
    ("turnkit_reconcile", ["--loop", "--passes", "0"], {"loop": True, "passes": 0},
     "argument --passes: must be a whole number from 1 to 2147483647; got '0'"),
    ("turnkit_prune", ["--older-than", "-1"], {"older_than": -1},
     "argument --older-than: must be a number of days from 0 to 36500; got '-1'"),
    ("turnkit_prune", ["--older-than", "30", "--batch", "0"], {"older_than": 30, "batch": 0},
     "argument --batch: must be a whole number from 1 to 2147483647; got '0'"),
]


@pytest.mark.parametrize(("name", "args", "keywords", "message"), EXACT,
                         ids=[f"{n} {a[-2]}" for n, a, _, _ in EXACT])
def test_a_refused_number_reads_the_same_every_way_the_command_is_called(
        name, args, keywords, message, capsys):
    with pytest.raises(CommandError) as from_arguments:
        call_command(name, *args, stdout=StringIO())
    assert str(from_arguments.value) == f"Error: {message}"
    with pytest.raises(CommandError) as from_keywords:
        call_command(name, **keywords, stdout=StringIO())
    assert str(from_keywords.value) == f"Error: {message}"
    command = load_command_class("turnkit_django", name)
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", name, *args])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == f"manage.py {name}: error: {message}"


def test_the_reference_quotes_the_interval_refusal_as_printed():
    reference = (Path(__file__).resolve().parents[2] / "docs/reference/api.md").read_text()
    assert f"`Error: {EXACT[0][3]}`" in reference
    assert f"`manage.py turnkit_reconcile: error: {EXACT[0][3]}`" in reference


NEEDS_LOOP = [
    (["--interval", "5"], {"interval": 5}, "argument --interval: needs --loop"),
    (["--passes", "2"], {"passes": 2}, "argument --passes: needs --loop"),
    (["--interval", "5", "--passes", "2"], {"interval": 5, "passes": 2},
     "argument --interval: needs --loop"),
]


@pytest.mark.parametrize(("args", "keywords", "message"), NEEDS_LOOP,
                         ids=[" ".join(a) for a, _, _ in NEEDS_LOOP])
def test_loop_options_without_loop_are_refused(args, keywords, message, capsys):
    """They used to be ignored: one pass ran and the command exited 0."""
    with pytest.raises(CommandError) as from_arguments:
        call_command("turnkit_reconcile", *args, stdout=StringIO())
    assert str(from_arguments.value) == f"Error: {message}"
    with pytest.raises(CommandError) as from_keywords:
        call_command("turnkit_reconcile", **keywords, stdout=StringIO())
    assert str(from_keywords.value) == f"Error: {message}"
    command = load_command_class("turnkit_django", "turnkit_reconcile")
    with pytest.raises(SystemExit) as exited:
        command.run_from_argv(["manage.py", "turnkit_reconcile", *args])
    assert exited.value.code == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"manage.py turnkit_reconcile: error: {message}")


def test_unset_loop_options_are_not_refused():
    assert "recovered 0" in call_command_output("turnkit_reconcile", interval=None, passes=None)


def test_numeric_options_in_range_are_taken():
    assert "would delete 0" in run_command("turnkit_prune", "--older-than", "0", "--dry-run")
    assert "would delete 0" in call_command_output("turnkit_prune", older_than="36500",
                                                   batch=2, dry_run=True)
    assert run_command("turnkit_reconcile", "--loop", "--passes", "1",
                       "--interval", "315360000") == ""


def call_command_output(name: str, **options: object) -> str:
    out = StringIO()
    call_command(name, **options, stdout=out)
    return out.getvalue()


# ------------------------------------------------------------------ inspect --json / --full


def long_run():
    text = "A long answer. " * 20
    agent = Agent("cmd_long", tools=[lookup], client=ScriptedClient([
        call("lookup", order_id="7" * 150), reply(text.strip()),
    ]))
    return agent.run("Where is order 7?"), text.strip()


def test_inspect_cuts_long_lines_unless_full():
    run, text = long_run()
    short = run_command("turnkit_inspect", run.id)
    assert "…" in short and text not in short
    full = run_command("turnkit_inspect", run.id, "--full")
    assert "…" not in full
    assert text in full and "7" * 150 in full


def test_inspect_json_is_one_document_with_tree_and_nested_transcript():
    run = finished_run()
    child = run.turns().exclude(pk=run.id).get()
    document = json.loads(run_command("turnkit_inspect", child.pk, "--json"))
    assert document["kind"] == "turn" and document["turn"]["id"] == child.pk
    assert [t["id"] for t in document["tree"]] == [run.id, child.pk]
    assert document["tree_totals"]["turns"] == 2
    messages = document["transcript"]["messages"]
    calls = [p for m in messages for p in m["parts"] if p["type"] == "tool_call"]
    assert calls[0] == {"type": "tool_call", "call_id": calls[0]["call_id"], "name": "lookup",
                        "arguments": {"order_id": "7"}, "status": "completed"}
    nested = calls[1]["sub_agent"]
    assert nested["turn"]["id"] == child.pk
    assert nested["messages"][-1]["parts"] == [{"type": "text", "text": "draft text"}]
    results = [p for m in messages for p in m["parts"] if p["type"] == "tool_result"]
    assert results[0]["state"] == "ok"
    conversation = json.loads(run_command("turnkit_inspect", run.conversation_id, "--json"))
    assert conversation["kind"] == "conversation"
    assert [t["id"] for t in conversation["turns"]] == [run.id]
    assert conversation["tree_totals"]["turns"] == 2


def test_inspect_prints_the_tree_in_parent_order():
    agent = Agent("cmd_tree", client=ScriptedClient([]))
    root = services.new_turn(agent, [TextPart("root")])
    a = services.new_turn(agent, [TextPart("a")], parent=root)
    b = services.new_turn(agent, [TextPart("b")], parent=root)
    a1 = services.new_turn(agent, [TextPart("a1")], parent=a)  # created after b
    text = run_command("turnkit_inspect", root.pk)
    lines = [line for line in text.splitlines() if "cmd_tree turn_" in line]
    assert [line.split()[-3] for line in lines] == [
        t.pk for t in (root, a, a1, b)]
    assert lines[2].startswith("      cmd_tree")  # a1 right under a, one level deeper
    as_json = json.loads(run_command("turnkit_inspect", b.pk, "--json"))
    assert [t["id"] for t in as_json["tree"]] == [root.pk, a.pk, a1.pk, b.pk]


# ----------------------------------------------------------------------------- verify ids


def test_verify_refuses_an_unknown_turn_or_conversation():
    with pytest.raises(CommandError, match=r"no turn with id 'nope'; nothing was checked"):
        run_command("turnkit_verify", "--turn", "nope")
    with pytest.raises(CommandError, match=r"no conversation with id 'conv_x'.*conv_\.\.\."):
        run_command("turnkit_verify", "--conversation", "conv_x")
    run = finished_run()
    with pytest.raises(CommandError, match="'nope'"):
        run_command("turnkit_verify", "--turn", run.id, "--turn", "nope")
    assert run_command("turnkit_verify", "--turn", run.id).startswith("ok: 1 conversations")


def test_verify_help_says_what_each_invariant_is():
    """``turnkit_verify --help`` named "invariants I1-I4, I6 and I7" and nothing more: each is now
    listed on its own line with what it means, as argparse would otherwise join the lines."""
    command = load_command_class("turnkit_django", "turnkit_verify")
    text = command.create_parser("manage.py", "turnkit_verify").format_help()
    lines = {line.split(" ", 1)[0]: line for line in (raw.strip() for raw in text.splitlines())
             if line[:1] == "I" and line[1:2].isdigit()}
    assert sorted(lines) == ["I1", "I2", "I3", "I4", "I6", "I7"]
    assert "each accepted input appears once" in lines["I2"]
    assert "cancel" in lines["I6"] and "wait" in lines["I7"]
