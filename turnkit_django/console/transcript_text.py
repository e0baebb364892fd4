"""Readable, aligned text transcripts of a turn and its sub-agents.

Used by ``manage.py turnkit_inspect`` and the demo; in a shell::

    from turnkit_django.console.transcript_text import show
    show(load_run("turn_..."))

Lines are cut to :data:`WIDTH` with ``…``; ``full=True`` keeps every character (long texts and
results continue on indented lines).
"""

from __future__ import annotations

import json

from ..api.handles import Run
from ..base.serialization import JsonMapping
from ..base.terminal import for_terminal
from ..messages import MEDIA_KINDS
from ..models import Turn
from .timeline import (
    ERROR,
    NOT_EXECUTED,
    OUTCOME_UNKNOWN,
    Entry,
    ToolCall,
    ToolResult,
    Totals,
    Tree,
    TurnTranscript,
    format_cost,
    load_tree,
    ran_seconds,
    turn_transcript,
)
from .timeline_media import media_line

WIDTH = 100


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def counted(number: int, noun: str) -> str:
    """``1 turn``, ``2 turns``: a count and its noun, singular or plural (nouns ending in s)."""
    return f"{number} {noun}" if number == 1 else f"{number} {noun}s"


def _json(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _arguments(arguments: JsonMapping) -> str:
    return ", ".join(f"{key}={_json(value)}" for key, value in arguments.items())


def result_text(content: object) -> str:
    """A tool result as one short JSON text; a sub-agent envelope without its ids."""
    if isinstance(content, dict) and {"agent", "turn_id", "status"} <= content.keys():
        content = {key: value for key, value in content.items()
                   if value is not None and key not in ("turn_id", "conversation_id")}
        return f"envelope {_json(content)}"
    return _json(content)


def _result(result: ToolResult) -> str:
    if result.state == OUTCOME_UNKNOWN:
        return f"⚠ {result.name}  outcome unknown: interrupted mid-call, it may or may not have run"
    if result.state == NOT_EXECUTED:
        return f"⊘ {result.name}  not executed: {result.message or result_text(result.content)}"
    mark = "✗" if result.state == ERROR else "←"
    return f"{mark} {result.name}  {result_text(result.content)}"


class _Lines:
    def __init__(self, full: bool) -> None:
        self.full = full
        self.lines: list[str] = []

    def add(self, prefix: str, text: str) -> None:
        """``prefix`` then ``text``: cut to the width, or whole (wrapped at newlines) if full."""
        if not self.full:
            self.lines.append(prefix + clip(text, WIDTH - len(prefix)))
            return
        first, *rest = str(text).splitlines() or [""]
        self.lines.append(prefix + first)
        self.lines.extend(" " * len(prefix) + line for line in rest)

    def transcript(self, view: TurnTranscript, indent: str) -> None:
        for entry in view.entries:
            self.entry(entry, indent)
        for other in view.others:
            self.lines.append(f"{indent}     · child turn {other.agent_name} · {other.pk} · "
                              f"{other.status}")

    def entry(self, entry: Entry, indent: str) -> None:
        prefix = f"{indent}#{entry.sequence:<3}{entry.role:<10} "
        for part in entry.parts:
            if isinstance(part, str):
                self.add(prefix, part)
            elif isinstance(part, ToolCall):
                self.call(part, prefix, indent)
            elif isinstance(part, ToolResult):
                self.add(prefix, _result(part))
                if part.attempts > 1:
                    self.lines.append(f"{indent}     ↻ ran {part.attempts} times with one "
                                      f"idempotency key: {part.idempotency_key}")
            elif part["type"] in ("image", "analysis"):
                self.add(prefix, media_line(part))
            else:
                self.lines.append(prefix + f"[{part['type']}]")

    def call(self, call: ToolCall, prefix: str, indent: str) -> None:
        arguments = call.raw_arguments if call.raw_arguments is not None else _arguments(
            call.arguments)
        self.add(prefix, f"→ {call.name}({arguments})")
        if call.child is not None:
            child = call.child.turn
            self.lines.append(f"{indent}     ┌─ {child.agent_name} · {child.pk} · {child.status}")
            self.transcript(call.child, indent + "     │ ")
            self.lines.append(f"{indent}     └─")


def transcript(turn: Turn, indent: str = "  ", *, full: bool = False,
               tree: Tree | None = None) -> list[str]:
    """The lines of what ``turn`` saw and wrote, each sub-agent's conversation nested in place."""
    lines = _Lines(full)
    lines.transcript(turn_transcript(turn, tree), indent)
    return lines.lines


def tree_lines(tree: Tree, *, highlight: str = "") -> list[str]:
    """The tree in parent order (children right under their parent), ``▶`` marking a turn."""
    lines = []
    for row in tree.in_parent_order():
        mark = "▶" if row.pk == highlight else " "
        took = ran_seconds(row)
        timing = "" if took is None else f" {took:.2f}s"
        lines.append(f"{mark} {'  ' * row.depth}{row.agent_name} {row.pk} {row.status} "
                     f"{format_cost(None if row.cost_unknown else row.cost)}{timing}")
    return lines


def summary(run: Run, *, full: bool = False, totals: Totals | None = None) -> list[str]:
    """Status, output, usage and cost of the whole tree, as aligned lines."""
    run.refresh()
    turns = list(run.turns())
    totals = totals or Totals.of(turns)
    usage = totals.usage
    names = ", ".join(t.agent_name for t in turns)
    calls = run.messages().filter(role="assistant").exclude(kind__in=MEDIA_KINDS).count()
    rows = [
        ("status", run.status),
        ("output", run.output_text or "-"),
        ("usage", f"{counted(calls, 'model call')} in {counted(len(turns), 'turn')} ({names}) · "
                  f"{usage.input_tokens:,} input + {usage.output_tokens:,} output tokens"),
        ("cost", "unknown (no rate for the model)" if totals.cost is None
         else f"${totals.cost:.6f}"),
    ]
    if run.error:
        rows.insert(2, ("error", _json(run.error)))
    lines = _Lines(full)
    for label, value in rows:
        lines.add(f"  {label:<9}", value)
    return lines.lines


def render(run: Run, *, full: bool = False) -> str:
    """The transcript of ``run``'s tree and its summary, as text."""
    tree = load_tree(run.row)
    return "\n".join([*transcript(run.row, full=full, tree=tree), "",
                      *summary(run, full=full, totals=tree.totals())])


def show(run: Run) -> None:
    """Print the transcript of ``run``'s tree and its summary, control characters made visible
    (:func:`~turnkit_django.base.terminal.for_terminal`)."""
    print(for_terminal(render(run)))  # noqa: T201 - an interactive helper
