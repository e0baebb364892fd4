"""SQL statements and commits per step of one turn, split at the loop's events.

Used by the unit test bounding them (tests/unit/test_step_cost.py) and by ``make bench``. A model
step runs from its ``model.requested`` event to the next step's first event (the response, and
whatever commits with it, such as the first tool call's intent or the publication); a tool call
runs from its ``tool_call.started`` event to the next step (its result and what commits with it).
Everything before the first model step (creation, claim, reading the transcript) is the turn's
set-up. ``BEGIN``, ``COMMIT`` and savepoints are counted apart from the statements.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from django.db import connection
from django.test.utils import CaptureQueriesContext

from turnkit_django.events import Event, EventCallback

_CONTROL = ("BEGIN", "COMMIT", "ROLLBACK", "SAVEPOINT", "RELEASE SAVEPOINT")
_BOUNDARIES = {"model.requested": "model", "tool_call.started": "tool", "turn.completed": "end",
               "turn.failed": "end"}


def _is_control(sql: str) -> bool:
    return sql.upper().startswith(_CONTROL)


@dataclass(frozen=True)
class Span:
    """The statements of one step (or of the set-up before the first one)."""

    kind: str  # "setup", "model" or "tool"
    sql: tuple[str, ...]

    @property
    def statements(self) -> list[str]:
        return [s for s in self.sql if not _is_control(s)]

    @property
    def commits(self) -> int:
        return sum(1 for s in self.sql if s.upper() == "COMMIT")


@dataclass(frozen=True)
class TurnCost:
    spans: tuple[Span, ...]

    def of(self, kind: str) -> list[Span]:
        return [s for s in self.spans if s.kind == kind]

    @property
    def statements(self) -> int:
        return sum(len(s.statements) for s in self.spans)

    @property
    def commits(self) -> int:
        return sum(s.commits for s in self.spans)


def measure(run: Callable[[EventCallback], Any]) -> TurnCost:
    """Run ``run(on_event)`` (a turn, from its creation) and split its SQL into steps."""
    marks: list[tuple[str, int]] = []
    with CaptureQueriesContext(connection) as captured:
        def on_event(event: Event) -> None:
            if event.type in _BOUNDARIES:
                marks.append((_BOUNDARIES[event.type], len(captured.captured_queries)))

        run(on_event)
    sql = [q["sql"] for q in captured.captured_queries]
    spans, start, kind = [], 0, "setup"
    for next_kind, end in marks:
        spans.append(Span(kind, tuple(sql[start:end])))
        start, kind = end, next_kind
        if kind == "end":
            break
    return TurnCost(tuple(spans))


__all__ = ["Span", "TurnCost", "measure"]
