"""Retention: deleting finished history (conversations with everything they hold)."""

from __future__ import annotations

from datetime import datetime

from django.db import transaction

from ..models import Conversation


def delete_prunable(before: datetime, limit: int) -> int:
    """Delete up to ``limit`` prunable root conversations (idle since ``before``, every turn
    finished) with their turns, messages, executions and children; return how many.

    Selected and deleted in one transaction, so a conversation that gets a new turn meanwhile
    is not deleted.
    """
    with transaction.atomic():
        ids = list(Conversation.objects.prunable(before).order_by("updated_at")
                   .values_list("pk", flat=True)[:limit])
        if ids:
            Conversation.objects.filter(pk__in=ids).delete()
    return len(ids)


__all__ = ["delete_prunable"]
