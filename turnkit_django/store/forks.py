"""Forks and retries: a new conversation holding copies of another's messages 1..n.

:func:`fork_conversation` writes the new conversation and the copies of its history in one
transaction and two statements (the row, one bulk insert), whatever the history's length. A
copy keeps its sequence, role, kind, content and metadata: sequences stay 1..n without gaps,
and compaction summaries that name sequences still name the same messages. Media parts
(images kept in a storage, media analyses) are references in the content, so the copies point
at the same files, which pruning never deletes. A copy belongs to no turn and no claim (like
application input): the fork's turns see it as history. :func:`retry_copy` is a retry's
transaction: the fork of the run's input, the new run in it, and the link to the original.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

from django.db import transaction

from ..base.serialization import JsonValue
from ..models import Conversation, Message, Turn
from .rows import new_row


def fork_conversation(source: Conversation, history: Sequence[Message], *,
                      principal: JsonValue) -> Conversation:
    """Create a root conversation with ``source``'s agent, model, subject, context and
    metadata, owned by ``principal``, holding copies of ``history`` (``source``'s messages
    1..n, in order), recorded as forked from ``source`` at n."""
    at = history[-1].sequence if history else 0
    with transaction.atomic():
        conversation = Conversation(
            agent_name=source.agent_name, model=source.model, principal=principal,
            subject_type_id=source.subject_type_id, subject_id=source.subject_id,
            subject_prompt=source.subject_prompt, context=source.context,
            metadata=source.metadata, forked_from_id=source.pk, forked_at=at, last_sequence=at)
        conversation.save(force_insert=True)
        Message.objects.bulk_create([
            new_row(Message, conversation_id=conversation.pk, sequence=row.sequence,
                    role=row.role, kind=row.kind, content=row.content,
                    metadata=row.metadata or {})
            for row in history])
    return conversation


def link_retry(turn: Turn, original: Turn) -> None:
    """Record ``turn`` as the retry of ``original`` (in the transaction that created it)."""
    Turn.objects.filter(pk=turn.pk).update(retry_of_id=original.pk)
    turn.retry_of_id = original.pk


def retry_copy(source: Conversation, original: Turn,
               history: Callable[[], Sequence[Message]], *, principal: JsonValue,
               create: Callable[[Conversation], Turn]) -> Turn:
    """In one transaction: fork ``source`` with ``history()`` (read in it), create the retry's
    root turn in the copy (``create(copy)``, the caller's new turn) and link it to
    ``original``; return the new turn."""
    with transaction.atomic():
        copy = fork_conversation(source, history(), principal=principal)
        row = create(copy)
        link_retry(row, original)
    return row


__all__ = ["fork_conversation", "link_retry", "retry_copy"]
