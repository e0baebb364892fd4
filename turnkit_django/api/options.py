"""The keyword options of the handles' methods, as TypedDicts, and their checking.

Every method taking ``**options`` names what it takes with one of these, and :func:`only`
refuses anything else with a TypeError listing what is accepted (nothing is ignored).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TypedDict

from django.db.models import Model

from ..agents.definition import Schema
from ..base.serialization import JsonObject
from ..conf.deltas import DeltaCallback
from ..events import EventCallback
from ..messages import TextPart
from ..store.input_checks import require_text


class ConversationOptions(TypedDict, total=False):
    """Options of a new conversation (``agent.conversation(...)``, and of a run's)."""

    principal: object
    context: JsonObject
    metadata: JsonObject
    subject: Model | None
    model: str | None


class TurnOptions(TypedDict, total=False):
    """Options of one turn (``conv.ask(...)``, ``conv.prepare_turn(...)``)."""

    principal: object
    context: JsonObject
    output_schema: Schema
    thinking: JsonObject | bool | None
    prompt_mode: str | None
    model: str | None
    compaction: bool | JsonObject | None
    on_delta: DeltaCallback | None  # inline only: each chunk of a streamed model response


class RunOptions(TurnOptions, total=False):
    """Options of a run (``agent.run(...)``, ``prepare``, ``submit``)."""

    input: object
    on_event: EventCallback | None
    metadata: JsonObject
    subject: Model | None


def only(method: str, options: Mapping[str, object], allowed: type) -> None:
    """Raise TypeError naming every option ``method`` does not take (nothing is ignored)."""
    known: frozenset[str] = allowed.__required_keys__ | allowed.__optional_keys__  # type: ignore[attr-defined]
    unknown = sorted(set(options) - known)
    if unknown:
        names = ", ".join(repr(name) for name in unknown)
        raise TypeError(f"{method}() got unexpected keyword argument{'s' * (len(unknown) > 1)} "
                        f"{names}; it takes {', '.join(sorted(known))}")


def task_parts(task: str, input: object) -> list[TextPart]:
    """A run's input message: the task, with its validated ``input`` rendered as JSON."""
    require_text(task, "a run's task", hint="; give structured data as input=..., which the "
                 "model sees with the task")
    if input is None:
        return [TextPart(task)]
    rendered = json.dumps(input, indent=2, sort_keys=True, default=str)
    return [TextPart(f"Task: {task}\n\nInput:\n{rendered}")]


__all__ = ["ConversationOptions", "RunOptions", "TurnOptions", "only", "task_parts"]
