"""The runtime's named reads: each one query, as the runtime made it, returned as plain values
or rows (the runtime imports neither ``django.db`` nor the models, issue 36)."""

from __future__ import annotations

from datetime import datetime

from ..models import ToolExecution, Turn


def turn_deadline(turn_id: str) -> datetime | None:
    """Read the turn's ``deadline_at`` as committed now (None: no deadline, or no turn)."""
    return Turn.objects.filter(pk=turn_id).values_list("deadline_at", flat=True).first()


def executions_by_call(turn_id: str) -> dict[str, ToolExecution]:
    """Read the turn's tool executions, keyed by their tool call id."""
    return {e.tool_call_id: e for e in ToolExecution.objects.filter(turn_id=turn_id)}


__all__ = ["executions_by_call", "turn_deadline"]
