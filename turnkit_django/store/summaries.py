"""A manual compaction's summary (``Conversation.compact()``): appended only to an idle
conversation, checked again in the transaction that appends it (a summary between a tool call
and its result would break the transcript)."""

from __future__ import annotations

from django.db import transaction

from ..exceptions import CompactionError
from ..models import Message, Turn
from .transcript import NewMessage, insert_messages


def refuse_if_busy(conversation_id: str) -> None:
    """CompactionError when a turn of the conversation is active."""
    if Turn.objects.filter(conversation_id=conversation_id).busy().exists():
        raise CompactionError(
            f"conversation {conversation_id!r} has an active turn; compact it when it is idle"
        )


def append_summary(conversation_id: str, summary: NewMessage) -> Message:
    """Append ``summary`` to the idle conversation (CompactionError, appending nothing, when a
    turn of it is active); return the row."""
    with transaction.atomic():
        refuse_if_busy(conversation_id)
        return insert_messages(conversation_id, [summary])[0]


__all__ = ["append_summary", "refuse_if_busy"]
