"""turnkit-django's write path alone: the statements of workload T's steps, sent back to back.

An inline turn of workload T sends one statement per step (``store.steps``). This part of the
benchmark records the writes of each step of one real turn (what the runtime buffered: the
turn's fields, the messages, the events, the tool executions created and moved), then sends
statements built from them by the store's own ``steps.statement``, on Django's connection
(server-bound, prepared), without the agent loop around them: no model call, no tool, no
decision, no statement building inside the timed call. Each replayed turn writes a scratch
copy of the recorded turn (a running turn of its own, with new ids for every row it inserts),
so every statement writes what the real step wrote: the same tables, indexes, foreign-key
checks and row sizes.

The difference from the real inline turn is the agent loop's own cost (the Python around the
statements, and a server that sleeps while it runs); the difference from the floor is the cost
of turnkit's rows and of its guards. Two simplifications, both cheaper than the real step by a
few conditions on a row it reads anyway: the ledger guard is left out (the statement is built
as under the tree lock, ``known=None``), and so is the turn's deadline.
"""

from __future__ import annotations

import copy
import secrets
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any
from unittest import mock

from django.db import connection

from turnkit_django.base.ids import new_id
from turnkit_django.models import Turn
from turnkit_django.store import steps
from turnkit_django.store.cursors import server_cursor
from turnkit_django.store.steps import StepWrites


@contextmanager
def recorded() -> Iterator[list[StepWrites]]:
    """The writes of every step sent meanwhile, as the store built its statements from them."""
    out: list[StepWrites] = []
    build = steps.statement

    def record(turn_id: str, root_id: str, conversation_id: str, fence: int, known: Any,
               writes: StepWrites) -> tuple[str, list[object]]:
        out.append(copy.deepcopy(writes))
        return build(turn_id, root_id, conversation_id, fence, known, writes)

    with mock.patch.object(steps, "statement", record):
        yield out


class WritePath:
    """``turn()`` sends the next prepared turn's statements (``len(recorded)`` steps)."""

    def __init__(self, run_turn: Callable[[], Any], turns: int) -> None:
        with recorded() as writes:
            run_turn()
        if not writes:
            raise SystemExit("the recorded turn sent no one-statement step")
        self.steps = len(writes)
        original = Turn.objects.filter(parent_turn_id=None).latest("created_at")
        self._pending = iter([self._prepared(original, writes) for _ in range(turns)])

    def _prepared(self, original: Turn, recorded: list[StepWrites]) -> list[tuple[str, list[Any]]]:
        """A scratch running copy of ``original`` and the statements of its steps."""
        scratch = copy.copy(original)
        scratch.pk = scratch.root_turn_id = new_id("turn")
        scratch.status, scratch.fence, scratch.deadline_at = "running", 1, None
        scratch.save(force_insert=True)
        renamed: dict[str, str] = {}  # the recorded tool executions' ids to the scratch ones'
        statements = []
        for writes in recorded:
            step = copy.deepcopy(writes)
            for message in step.messages:
                message.pk, message.turn_id = new_id("msg"), scratch.pk
                if message.tool_execution_id:
                    message.tool_execution_id = renamed[message.tool_execution_id]
            for event in step.events:
                event.turn_id = event.root_turn_id = scratch.pk
            for execution in step.created:
                renamed[execution.pk] = new_id("tex")
                execution.pk, execution.turn_id = renamed[execution.pk], scratch.pk
                execution.tool_call_id = f"call_{secrets.token_hex(8)}"
            step.moves = [replace(m, execution_id=renamed[m.execution_id]) for m in step.moves]
            statements.append(steps.statement(scratch.pk, scratch.pk, scratch.conversation_id,
                                              scratch.fence, None, step))
        return statements

    def turn(self) -> None:
        for text, params in next(self._pending):
            with server_cursor(connection) as cursor:
                cursor.execute(text, params)
                cursor.fetchone()


__all__ = ["WritePath", "recorded"]
