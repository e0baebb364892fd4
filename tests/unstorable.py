"""Model and tool output no database stores as given (NUL, lone surrogates, NaN, infinity,
tool names and call ids longer than their columns).

Shared by the unit tier (SQLite) and the integration tier (PostgreSQL): each case runs a turn
and checks what was stored, which must be the same on both databases.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from turnkit_django import Agent, services, tool
from turnkit_django.models import Message, ToolExecution
from turnkit_django.testing import ScriptedClient, call, reply

EFFECTS: list[str] = []


@tool
def echo(s: str) -> str:
    """Echo ``s``."""
    EFFECTS.append(s)
    return s


@tool
def read_file(path: str) -> str:
    """Read a file with a NUL byte in it."""
    EFFECTS.append(path)
    return "head\x00tail"


@tool
def ratios() -> dict[str, float]:
    """Numbers JSON cannot hold."""
    EFFECTS.append("ratios")
    return {"nan": float("nan"), "inf": float("inf"), "ninf": float("-inf"), "one": 1.5}


@tool
def explode() -> str:
    """Fail with a NUL in the message."""
    EFFECTS.append("explode")
    raise ValueError("bad\x00value")


@dataclass(frozen=True)
class Case:
    script: list[Any]
    output_text: str = "done"
    #: The stored (status, tool_call_id, tool_name, arguments, result) of the one execution.
    execution: tuple[str, str, str, dict[str, Any], Any] | None = None
    effects: tuple[str, ...] = ()
    #: The ``error`` of the one tool result the model reads, when the call is refused.
    refusal: str | None = None


CASES = {
    "tool result NUL": Case([call("read_file", id="c1", path="p"), reply("done")],
                            execution=("completed", "c1", "read_file", {"path": "p"},
                                       "head\ufffdtail"), effects=("p",)),
    "argument NUL": Case([call("echo", id="c1", s="a\x00b"), reply("done")],
                         execution=("completed", "c1", "echo", {"s": "a\ufffdb"}, "a\ufffdb"),
                         effects=("a\ufffdb",)),  # the tool gets the arguments as stored
    "argument lone surrogate": Case(
        [call("echo", id="c1", s="a\ud800b\U0001f600"), reply("done")],
        execution=("completed", "c1", "echo", {"s": "a\ufffdb\U0001f600"}, "a\ufffdb\U0001f600"),
        effects=("a\ufffdb\U0001f600",)),
    "argument key NUL": Case([call("echo", id="c1", s="x", **{"k\x00": 1}), reply("done")]),
    "reply NUL": Case([reply("do\x00ne")], output_text="do\ufffdne"),
    "reply lone surrogate": Case([reply("do\udc00ne")], output_text="do\ufffdne"),
    "tool result NaN": Case([call("ratios", id="c1"), reply("done")],
                            execution=("completed", "c1", "ratios", {},
                                       {"nan": "nan", "inf": "inf", "ninf": "-inf",
                                        "one": 1.5}), effects=("ratios",)),
    "tool name NUL": Case([call("ec\x00ho", id="c1", s="x"), reply("done")],
                          execution=("failed", "c1", "ec\ufffdho", {"s": "x"}, None)),
    "tool call id NUL": Case([call("echo", id="c\x00\ud8001", s="x"), reply("done")],
                             execution=("completed", "c\ufffd\ufffd1", "echo", {"s": "x"}, "x"),
                             effects=("x",)),
    "tool error NUL": Case([call("explode", id="c1"), reply("done")],
                           execution=("failed", "c1", "explode", {}, None),
                           effects=("explode",)),
    # ToolExecution.tool_name and tool_call_id are varchar(200): PostgreSQL raised DataError
    # (an inline run failed; a background turn was asked again after each lease expiry, then
    # dead-lettered) where SQLite stored the value.
    "tool name too long": Case([call("z" * 300, id="c1"), reply("done")],
                               execution=("failed", "c1", "z" * 200, {}, None),
                               refusal="unknown_tool"),
    "tool call id too long": Case([call("echo", id="y" * 300, s="x"), reply("done")],
                                  execution=("completed", "y" * 48 + "_2", "echo", {"s": "x"},
                                             "x"), effects=("x",)),
}

#: The cases whose values are too long for their columns (run in the background too).
TOO_LONG = ("tool name too long", "tool call id too long")


def run_case(case: Case, registered: Any = None) -> None:
    """Run ``case`` (inline, or submitted and run by ``services.run_turn`` when given the
    ``registered`` fixture) and assert what was stored (the invariants are checked after the
    test)."""
    EFFECTS.clear()
    agent = Agent("unstorable", instructions="Use the tools.", tools=[echo, read_file, ratios,
                                                                       explode],
                  client=ScriptedClient(case.script))
    if registered is None:
        run = agent.run("go")
    else:
        run = registered(agent).submit("go")
        services.run_turn(run.id)
        run = run.refresh()
    assert (run.status, run.error, run.output_text) == ("completed", None, case.output_text)
    assert tuple(EFFECTS) == case.effects  # each side effect once, never repeated
    stored = run.refresh().output_text
    assert stored == case.output_text
    executions = list(ToolExecution.objects.filter(turn_id=run.id))
    results = [p for m in Message.objects.filter(conversation_id=run.conversation_id,
                                                 kind="tool_result")
               for p in m.content]
    if case.execution is not None:
        status, call_id, name, arguments, result = case.execution
        [execution] = executions
        assert (execution.status, execution.tool_call_id, execution.tool_name,
                execution.arguments, execution.result) == (status, call_id, name, arguments,
                                                           result)
        [part] = results  # the tool message is written with the result, never "unknown"
        assert part["tool_call_id"] == call_id
        if status == "completed":
            assert part["content"] == result and not part["is_error"]
        else:
            assert part["is_error"] and "\x00" not in str(execution.error)
        if case.refusal is not None:  # a result the model reads, not a failed turn
            assert part["content"]["error"] == case.refusal
            assert len(part["content"]["message"]) < 500
    assert "\x00" not in str(list(Message.objects.values_list("content", flat=True)))


__all__ = ["CASES", "TOO_LONG", "Case", "run_case"]
