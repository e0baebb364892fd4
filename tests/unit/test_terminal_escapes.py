"""What the ``turnkit_*`` commands print shows control characters instead of obeying them: model
text with ``ESC [2K ESC [1A`` erased the line above in the operator's terminal (an "outcome
unknown" warning), an OSC 8 sequence added a hyperlink, a bidi override showed text backwards."""

from __future__ import annotations

import json
import re
from io import StringIO

import pytest
from django.core.management import call_command, load_command_class

from turnkit_django import Agent, ToolError
from turnkit_django.base.terminal import for_terminal
from turnkit_django.testing import ScriptedClient, call, reply
from turnkit_django.tools.tool import tool

ERASE = "\x1b[2K\x1b[1A"
LINK = "\x1b]8;;https://evil.example/\x1b\\click here\x1b]8;;\x1b\\"
REPLY = f"Done.{ERASE} {LINK} \u202edesrever\u202c \x9b2K \x7f\r tab\tand\nnext line"
#: Written out here, not imported: ESC and the other C0 controls but newline and tab, DEL, C1,
#: the bidi embeddings, overrides and isolates.
RAW = re.compile("[\x00-\x08\x0b-\x1f\x7f\x80-\x9f\u202a-\u202e\u2066-\u2069]")


@tool
def term_lookup(order_id: str) -> dict:
    """Look an order up."""
    raise ToolError(f"no order {LINK}")


def hostile_run():
    agent = Agent("term_support", tools=[term_lookup], client=ScriptedClient([
        call("term_lookup", order_id=ERASE), reply(REPLY)]))
    return agent.run("Where is \u2066order\u2069 7?")


def strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in strings(item)]
    return [value] if isinstance(value, str) else []


def run_command(*args: str) -> str:
    out = StringIO()
    call_command(*args, stdout=out)
    return out.getvalue()


@pytest.mark.django_db
@pytest.mark.parametrize("options", [[], ["--full"]], ids=["cut", "full"])
def test_inspect_shows_control_characters_escaped(options: list[str]) -> None:
    run = hostile_run()
    assert run.status == "completed"
    for ident in (run.id, run.conversation_id):
        text = run_command("turnkit_inspect", ident, *options)
        assert not RAW.search(text), RAW.findall(text)
        assert "Done.\\x1b[2K\\x1b[1A" in text and "\\u202edesrever\\u202c" in text
        assert "\\x9b2K \\x7f" in text and "\\u2066order\\u2069" in text
    text = run_command("turnkit_inspect", run.id, "--full")
    assert "\\x1b]8;;https://evil.example/\\x1b\\click here" in text  # the tool's error
    assert "outcome unknown" not in text and "term_lookup" in text


@pytest.mark.django_db
def test_inspect_json_escapes_them_and_reads_back_the_same() -> None:
    run = hostile_run()
    for ident in (run.id, run.conversation_id):
        printed = run_command("turnkit_inspect", ident, "--json")
        assert not RAW.search(printed), RAW.findall(printed)
        assert "\\u202e" in printed and "\\u009b" in printed
        assert REPLY in strings(json.loads(printed))  # the same text, read back


def test_a_command_s_errors_are_escaped_too() -> None:
    """``manage.py`` prints a CommandError on the command's ``stderr``: escaped there too."""
    out, err = StringIO(), StringIO()
    command = load_command_class("turnkit_django", "turnkit_verify")
    command.__init__(stdout=out, stderr=err)  # type: ignore[misc]
    command.stderr.write(f"CommandError: {ERASE}")
    command.stdout.write(LINK, ending="")
    assert err.getvalue() == "CommandError: \\x1b[2K\\x1b[1A\n"
    assert out.getvalue() == "\\x1b]8;;https://evil.example/\\x1b\\click here\\x1b]8;;\\x1b\\"


@pytest.mark.parametrize(("raw", "shown"), [
    ("\x00\x07\x08\x0b\x0c\x0d\x1b\x1f", "\\x00\\x07\\x08\\x0b\\x0c\\x0d\\x1b\\x1f"),
    ("\x7f\x80\x85\x9b\x9f", "\\x7f\\x80\\x85\\x9b\\x9f"),
    ("\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069",
     "\\u202a\\u202b\\u202c\\u202d\\u202e\\u2066\\u2067\\u2068\\u2069"),
    ("line\n\ttabbed, é ü 日本 \u200d ok \\x1b", "line\n\ttabbed, é ü 日本 \u200d ok \\x1b"),
])
def test_for_terminal_escapes_exactly_the_controls(raw: str, shown: str) -> None:
    assert for_terminal(raw) == shown
