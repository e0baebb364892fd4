"""Statuses of turns and tool executions, and which transitions are legal."""

from __future__ import annotations

from django.db import models


class TurnStatus(models.TextChoices):
    PENDING = "pending"
    WAITING = "waiting"
    PAUSED = "paused"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    STALE = "stale"


TERMINAL_TURN_STATUSES = frozenset(
    {TurnStatus.COMPLETED, TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.STALE}
)
ACTIVE_TURN_STATUSES = frozenset(
    {TurnStatus.PENDING, TurnStatus.WAITING, TurnStatus.PAUSED, TurnStatus.RUNNING}
)


class ToolStatus(models.TextChoices):
    PENDING = "pending"
    RUNNING = "running"
    COMPLETED = "completed"
    FAILED = "failed"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"


FINISHED_TOOL_STATUSES = frozenset(
    {ToolStatus.COMPLETED, ToolStatus.FAILED, ToolStatus.CANCELLED, ToolStatus.INTERRUPTED}
)


class Phase(models.TextChoices):
    """Where the persisted loop of a turn stands (``Turn.state["phase"]``)."""

    MODEL = "model"
    TOOLS = "tools"
    OUTPUT = "output"
    DONE = "done"


TURN_TRANSITIONS: dict[str, frozenset[str]] = {
    TurnStatus.PENDING: frozenset(
        {TurnStatus.RUNNING, TurnStatus.WAITING, TurnStatus.PAUSED, TurnStatus.CANCELLED,
         TurnStatus.STALE, TurnStatus.FAILED}
    ),
    TurnStatus.WAITING: frozenset(
        {TurnStatus.PENDING, TurnStatus.PAUSED, TurnStatus.CANCELLED, TurnStatus.FAILED}
    ),
    TurnStatus.PAUSED: frozenset({TurnStatus.PENDING, TurnStatus.WAITING, TurnStatus.CANCELLED}),
    TurnStatus.RUNNING: frozenset(
        {TurnStatus.WAITING, TurnStatus.PENDING, TurnStatus.COMPLETED, TurnStatus.FAILED,
         TurnStatus.CANCELLED, TurnStatus.STALE}
    ),
}


def can_transition(current: str, target: str) -> bool:
    """Return whether a turn may move from ``current`` to ``target``."""
    return target in TURN_TRANSITIONS.get(current, frozenset())
