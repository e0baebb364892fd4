"""Retention: delete finished history older than a cutoff, in bounded batches."""

from __future__ import annotations

from datetime import datetime

from ..conf import turnkit_settings
from ..models import Conversation
from ..store.retention import delete_prunable


def prune(*, before: datetime, batch: int | None = None, dry_run: bool = False) -> int:
    """Delete root conversations idle since ``before`` whose turns are all finished.

    Works in batches of ``batch`` (default MAINTENANCE_BATCH_SIZE) conversations, each in its
    own short transaction; child conversations, turns, messages and tool executions go with
    their root by cascade. Returns how many root conversations were (or would be) deleted.
    """
    size = int(batch or turnkit_settings.MAINTENANCE_BATCH_SIZE)
    if dry_run:
        return Conversation.objects.prunable(before).count()
    total = 0
    while deleted := delete_prunable(before, size):
        total += deleted
    return total


__all__ = ["prune"]
