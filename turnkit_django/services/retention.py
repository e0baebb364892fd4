"""Retention: delete finished history older than a cutoff, in bounded batches."""

from __future__ import annotations

from datetime import datetime

from ..conf import turnkit_settings
from ..store.retention import delete_prunable


def prune(*, before: datetime, batch: int | None = None, dry_run: bool = False) -> int:
    """Delete root conversations idle since ``before`` on which nothing in flight depends.

    Works in batches of ``batch`` (default MAINTENANCE_BATCH_SIZE) candidates, each in its own
    short transaction; child conversations (every level), turns, messages, tool executions and
    events go with their root. Turns of the pruned runs that live in other conversations (a
    reply a ``send_message`` woke) are detached and kept, each part a run of its own; a root
    is skipped while such a turn, or anything else that depends on it, is active (see
    :mod:`turnkit_django.store.retention`). Returns how many root conversations were (or would
    be) deleted.
    """
    size = int(batch or turnkit_settings.MAINTENANCE_BATCH_SIZE)
    total, after = 0, None
    while True:
        deleted, after = delete_prunable(before, size, after, dry_run=dry_run)
        total += deleted
        if after is None:
            return total


__all__ = ["prune"]
