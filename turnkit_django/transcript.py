"""Readable, aligned text transcripts of a turn and its sub-agents.

Used by ``manage.py turnkit_inspect`` and the demo; in a shell::

    from turnkit_django.transcript import show
    show(load_run("turn_..."))
"""

from __future__ import annotations

import json
from typing import Any

from .handles import Run
from .messages import ToolResultPart, load_parts
from .models import Message, ToolExecution, Turn

WIDTH = 100


def clip(text: str, width: int) -> str:
    """One line of at most ``width`` characters."""
    line = " ".join(str(text).split())
    return line if len(line) <= width else line[: max(width - 1, 0)] + "…"


def _json(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, default=str)


def _arguments(arguments: dict[str, Any]) -> str:
    return ", ".join(f"{key}={_json(value)}" for key, value in arguments.items())


def result_text(content: Any) -> str:
    """A tool result as one short JSON text; a sub-agent envelope without its ids."""
    if isinstance(content, dict) and {"agent", "turn_id", "status"} <= content.keys():
        content = {key: value for key, value in content.items()
                   if value is not None and key not in ("turn_id", "conversation_id")}
        return f"envelope {_json(content)}"
    return _json(content)


def _result(part: ToolResultPart, execution: ToolExecution | None) -> str:
    content = part.content
    error = content.get("error") if isinstance(content, dict) else None
    if error == "outcome_unknown" or (execution and execution.status == "interrupted"):
        return f"⚠ {part.name}  outcome unknown: interrupted mid-call, it may or may not have run"
    mark = "✗" if part.is_error else "←"
    return f"{mark} {part.name}  {result_text(content)}"


def transcript(turn: Turn, indent: str = "  ") -> list[str]:
    """The lines of ``turn``'s conversation, with each sub-agent's conversation nested in place."""
    executions = {e.tool_call_id: e for e in ToolExecution.objects.filter(turn=turn)}
    children = {c.parent_tool_execution_id: c for c in Turn.objects.filter(parent_turn=turn)}
    lines: list[str] = []
    for message in Message.objects.filter(conversation_id=turn.conversation_id).order_by(
            "sequence"):
        for part in load_parts(message.content):
            prefix = f"{indent}#{message.sequence:<3}{message.role:<10} "
            room = WIDTH - len(prefix)
            if part.kind == "text":
                lines.append(prefix + clip(part.text, room))
            elif part.kind == "tool_call":
                lines.append(prefix + clip(f"→ {part.name}({_arguments(part.arguments)})", room))
                execution = executions.get(part.id)
                child = children.get(execution.pk) if execution else None
                if child is not None:
                    lines.append(f"{indent}     ┌─ {child.agent_name} · {child.pk} · "
                                 f"{child.status}")
                    lines += transcript(child, indent + "     │ ")
                    lines.append(f"{indent}     └─")
            elif part.kind == "tool_result":
                execution = executions.get(part.tool_call_id)
                lines.append(prefix + clip(_result(part, execution), room))
                if execution is not None and execution.attempts > 1:
                    lines.append(f"{indent}     ↻ ran {execution.attempts} times with one "
                                 f"idempotency key: {execution.idempotency_key}")
            else:
                lines.append(prefix + f"[{part.kind}]")
    return lines


def summary(run: Run) -> list[str]:
    """Status, output, usage and cost of the whole tree, as aligned lines."""
    run.refresh()
    usage = run.usage
    turns = list(run.turns().values_list("agent_name", flat=True))
    calls = run.messages().filter(role="assistant").count()
    cost = run.cost
    rows = [
        ("status", run.status),
        ("output", run.output_text or "-"),
        ("usage", f"{calls} model calls in {len(turns)} turns ({', '.join(turns)}) · "
                  f"{usage.input_tokens:,} input + {usage.output_tokens:,} output tokens"),
        ("cost", "unknown (no rate for the model)" if cost is None else f"${cost:.6f}"),
    ]
    if run.error:
        rows.insert(2, ("error", clip(_json(run.error), WIDTH - 12)))
    return [f"  {label:<9}{value}" for label, value in rows]


def render(run: Run) -> str:
    """The transcript of ``run``'s tree and its summary, as text."""
    return "\n".join([*transcript(run.row), "", *summary(run)])


def show(run: Run) -> None:
    """Print the transcript of ``run``'s tree and its summary."""
    print(render(run))  # noqa: T201 - an interactive helper
