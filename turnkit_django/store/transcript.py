"""Transcripts: gap-free sequences, appended messages, the messages a turn sees, and repair.

Sequences are allocated under the conversation lock (an ``UPDATE ... RETURNING`` of
``Conversation.last_sequence``), so a conversation's messages are numbered 1..n without gaps.
:func:`repair` gives every open tool call of a turn exactly one result (P11); it is used when a
turn stops without finishing its tool batch (failure, cancel, stale, dead-letter), and
:func:`interrupt_running` reports "outcome unknown" for calls whose worker died.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from datetime import datetime

from django.db import IntegrityError, connection, transaction
from django.db.models import F, JSONField, Q, Value
from django.db.models.expressions import RawSQL
from django.db.models.functions import Now
from django.utils import timezone

from ..base.error_records import not_executed, outcome_unknown
from ..base.serialization import JsonMapping, JsonObject, JsonValue
from ..base.states import ToolStatus
from ..messages import ChatMessage, MessageKind, Part, ToolResultPart, dump_parts, load_parts
from ..models import Conversation, Message, ToolExecution, Turn
from .compiled import CompiledRead
from .events import record_event, stamp
from .locks import database_now
from .rows import new_row
from .seen import History, read_through


@dataclass
class NewMessage:
    role: str
    parts: Sequence[Part]
    kind: str = MessageKind.TEXT
    turn_id: str | None = None
    tool_execution_id: str | None = None
    metadata: JsonMapping | None = None
    fence: int | None = None
    #: The application's idempotency key of an input (unique per conversation).
    key: str | None = None


def allocate_sequences(conversation_id: str, count: int = 1, *, touch: bool = True) -> int:
    """Reserve ``count`` message sequences under the conversation lock; return the first.

    ``touch`` moves the conversation's ``updated_at`` (idle since) too; a turn's own steps leave
    it, so their update of the row stays a HOT update, and its terminal write moves it.
    """
    table = Conversation._meta.db_table
    touched = ", updated_at = statement_timestamp()" if touch else ""
    if connection.vendor != "postgresql":
        touched = ", updated_at = %s" if touch else ""
    params: list[int | datetime] = [count]
    if touch and connection.vendor != "postgresql":
        params.append(timezone.now())
    with connection.cursor() as cursor:
        cursor.execute(
            f"UPDATE {table} SET last_sequence = last_sequence + %s{touched} "  # noqa: S608
            "WHERE id = %s RETURNING last_sequence",
            [*params, conversation_id],
        )
        row = cursor.fetchone()
    if row is None:
        raise Conversation.DoesNotExist(f"conversation {conversation_id!r} does not exist")
    return int(row[0]) - count + 1


def build_messages(conversation_id: str, messages: Sequence[NewMessage]) -> list[Message]:
    """The rows of ``messages`` (unsaved, without their sequences yet)."""
    return [
        new_row(
            Message,
            conversation_id=conversation_id,
            turn_id=m.turn_id,
            role=m.role,
            kind=m.kind,
            content=dump_parts(m.parts),
            tool_execution_id=m.tool_execution_id,
            metadata=m.metadata or {},
            fence=m.fence,
            key=m.key or "",
        )
        for m in messages
    ]


def insert_rows(conversation_id: str, rows: list[Message], *, touch: bool = True,
                ) -> list[Message]:
    """Number ``rows`` after the conversation's last message and insert them."""
    if not rows:
        return rows
    first = allocate_sequences(conversation_id, len(rows), touch=touch)
    for index, row in enumerate(rows):
        row.sequence = first + index
    if len(rows) == 1:
        rows[0].save(force_insert=True)
    else:
        Message.objects.bulk_create(rows)
    return rows


def insert_messages(conversation_id: str, messages: Sequence[NewMessage]) -> list[Message]:
    """Append messages with gap-free sequences; the caller holds any tree lock it needs."""
    return insert_rows(conversation_id, build_messages(conversation_id, messages))


class InputKeyTaken(Exception):
    """Another call stored an input with this key in the conversation first (they raced)."""


@contextmanager
def keyed_write(conversation_id: str, key: str | None) -> Iterator[None]:
    """The write of an input keyed ``key``, in a savepoint: an input stored meanwhile with the
    key in the conversation raises InputKeyTaken and the caller's transaction goes on (the
    caller reads it); any other integrity error is raised as it is."""
    if not key:
        yield
        return
    try:
        with transaction.atomic():
            yield
    except IntegrityError as exc:
        if not Message.objects.filter(conversation_id=conversation_id, key=key).exists():
            raise
        raise InputKeyTaken(key) from exc


def append_input(conversation_id: str, parts: Sequence[Part], *,
                 metadata: JsonMapping | None = None, key: str | None = None) -> Message:
    """Append application input (not owned by any claim) to a conversation."""
    with keyed_write(conversation_id, key), transaction.atomic():
        return insert_messages(conversation_id, [NewMessage("user", parts, metadata=metadata,
                                                            key=key)])[0]


def to_chat(message: Message) -> ChatMessage:
    """A stored message as the model sees it (the transcript's storage boundary)."""
    return ChatMessage(message.role, tuple(load_parts(message.content)),  # type: ignore[arg-type]
                       message.kind, message.sequence, message.metadata or {})


#: What a turn reads of the messages it sees past ``after``: ``Message.objects.visible_to``,
#: compiled once per process (:mod:`.compiled`). The sequences are expressions so that the ORM
#: keeps them as parameters (an integer lookup would try to convert the placeholder).
#: The attribute of a claimed turn's row holding its :func:`visible_tail` (a list).
TAIL = "_visible_tail"
_VISIBLE = CompiledRead(lambda conversation_id, upto, turn_id, after: Message.objects.filter(
    Q(sequence__lte=Value(upto)) | Q(turn_id=turn_id), conversation_id=conversation_id,
    sequence__gt=Value(after)).order_by("sequence").values_list(
    "role", "content", "kind", "sequence", "metadata"), 4)


def visible_tail() -> RawSQL:
    """A column of a read of turns: the messages a turn sees from its input's last message on
    (that message and the turn's own) as a JSON array of ``[role, content, kind, sequence,
    metadata]``, or null when there are none. A claim reads it with the row
    (:func:`.claims.claim_turn`), so a turn whose earlier history this process holds reads no
    message (:func:`visible_history`)."""
    quote = connection.ops.quote_name
    turn, message = quote(Turn._meta.db_table), quote(Message._meta.db_table)
    return RawSQL(  # noqa: S611 (identifiers only)
        "(SELECT jsonb_agg(jsonb_build_array(m.role, m.content, m.kind, m.sequence, "  # noqa: S608
        f"m.metadata) ORDER BY m.sequence) FROM {message} m WHERE m.conversation_id = "
        f"{turn}.conversation_id AND m.sequence >= {turn}.context_sequence AND (m.sequence = "
        f"{turn}.context_sequence OR m.turn_id = {turn}.id))", (), output_field=JSONField())


def visible_history(turn: Turn) -> History:
    """The messages ``turn`` sees, as the model sees them, in sequence order, with their facts.

    Reads only what this process has not read before (:mod:`.seen`): the input past the last
    turn of the conversation it read, and the turn's own messages; nothing when the claim that
    read ``turn`` brought its :func:`visible_tail` and this process holds what comes before.
    """
    tail = vars(turn).pop(TAIL, None)  # what the claim read, once: it is stale after a step

    def read(after: int) -> list[ChatMessage]:
        rows = ([r for r in tail if r[3] > after] if tail is not None
                and after >= turn.context_sequence - 1 else _VISIBLE.rows(
                    turn.conversation_id, turn.context_sequence, turn.pk, after))
        return [ChatMessage(role, tuple(load_parts(content)), kind, sequence, metadata or {})
                for role, content, kind, sequence, metadata in rows]

    return read_through(turn.conversation_id, turn.context_sequence, read)


def visible_chat(turn: Turn) -> list[ChatMessage]:
    """The messages ``turn`` sees, as the model sees them, in sequence order."""
    return visible_history(turn).messages


# --------------------------------------------------------------------------- repair


@dataclass(frozen=True)
class ClosedCall:
    """A tool call that :func:`repair` or :func:`interrupt_running` gave its result."""

    call_id: str
    name: str
    execution_id: str
    interrupted: bool
    message_id: str = ""
    #: The call was parked for approval: the repair closed its request as ``cancelled``.
    approval_cancelled: bool = False


def _result(execution_id: str, turn: Turn, call_id: str, name: str, content: JsonValue, *,
            metadata: JsonMapping, fence: int | None) -> NewMessage:
    return NewMessage("tool", [ToolResultPart(call_id, name, content, is_error=True)],
                      kind=MessageKind.TOOL_RESULT, turn_id=turn.pk,
                      tool_execution_id=execution_id, metadata=metadata, fence=fence)


def _open_request(execution: ToolExecution) -> JsonObject | None:
    """The call's approval request while it waits for a person's decision, else None."""
    approval = execution.approval
    return approval if isinstance(approval, dict) and approval.get("state") == "requested" \
        else None


def _close(turn: Turn, execution: ToolExecution, reason: str, **fields: object) -> bool:
    """Finish an execution with ``fields`` (compare-and-set on its current status); return
    whether it moved. An open approval request closes with it as ``cancelled``, with its
    durable ``approval.cancelled`` event: no decision can run the call any more."""
    request = _open_request(execution)
    if request is not None:
        fields["approval"] = {**request, "state": "cancelled", "reason": reason,
                              "cancelled_at": stamp(database_now())}
    # Compare-and-set on the start too: a call that starts meanwhile is not "not executed".
    moved = bool(ToolExecution.objects.filter(
        pk=execution.pk, status=execution.status,
        started_at__isnull=execution.started_at is None).update(
        completed_at=Now(), updated_at=Now(), **fields))
    if moved and request is not None:
        record_event(turn.root_turn_id, turn.pk, turn.conversation_id, "approval.cancelled",
                     {"call_id": execution.tool_call_id, "execution_id": execution.pk,
                      "tool": execution.tool_name, "reason": reason})
    return moved


def _interrupt(turn: Turn, execution: ToolExecution, reason: str) -> bool:
    """Mark a started execution ``interrupted``: its outcome is unknown."""
    return _close(turn, execution, reason, status=ToolStatus.INTERRUPTED,
                  error=outcome_unknown().for_model())


def interrupt_running(turn: Turn, *, replay_safe: Iterable[str] = ()) -> list[ClosedCall]:
    """Recovery of a turn whose worker died: its running tool calls' outcome is unknown.

    A running execution of a tool named in ``replay_safe`` goes back to ``pending`` (the resumed
    turn re-runs it with the same idempotency key), and so does one whose start was never
    recorded (it never ran; its attempt undone); any other becomes ``interrupted`` and gets
    its "outcome unknown" result now. The caller holds the tree lock.
    """
    safe = set(replay_safe)
    closed: list[ClosedCall] = []
    messages: list[NewMessage] = []
    for execution in ToolExecution.objects.filter(turn_id=turn.pk).running():
        if execution.tool_name in safe:
            ToolExecution.objects.filter(pk=execution.pk).running().update(
                status=ToolStatus.PENDING, updated_at=Now())
            continue
        if execution.started_at is None:  # its intent only: it never started, it runs later
            ToolExecution.objects.filter(pk=execution.pk, started_at__isnull=True).running(
            ).update(status=ToolStatus.PENDING, attempts=F("attempts") - 1, updated_at=Now())
            continue
        if _interrupt(turn, execution, "its worker was lost"):
            messages.append(_result(execution.pk, turn, execution.tool_call_id,
                                    execution.tool_name, outcome_unknown().for_model(),
                                    metadata={"interrupted": True}, fence=None))
            closed.append(ClosedCall(execution.tool_call_id, execution.tool_name, execution.pk,
                                     True))
    return _with_messages(closed, insert_messages(turn.conversation_id, messages))


def _with_messages(closed: list[ClosedCall], rows: list[Message]) -> list[ClosedCall]:
    return [replace(call, message_id=row.pk) for call, row in zip(closed, rows, strict=True)]


def open_tool_calls(turn_id: str) -> list[tuple[str, str, JsonObject]]:
    """Return (call id, tool name, arguments) of calls in the turn without a result message."""
    calls: list[tuple[str, str, JsonObject]] = []
    answered: set[str] = set()
    seen: set[str] = set()
    for stored in Message.objects.filter(turn_id=turn_id).values_list("content", flat=True):
        for part in load_parts(stored):
            if part.kind == "tool_call" and part.id not in seen:  # one result per id (P11)
                seen.add(part.id)
                calls.append((part.id, part.name, part.arguments))
            elif part.kind == "tool_result":
                answered.add(part.tool_call_id)
    return [c for c in calls if c[0] not in answered]


def repair(turn: Turn, *, reason: str, fence: int | None = None) -> list[ClosedCall]:
    """Close the turn's open tool calls; running executions become ``interrupted``.

    Returns the calls it closed. The caller holds the tree lock inside a transaction.
    """
    pending = open_tool_calls(turn.pk)
    if not pending:
        return []
    executions = {e.tool_call_id: e for e in ToolExecution.objects.filter(
        turn_id=turn.pk, tool_call_id__in=[c[0] for c in pending])}
    messages: list[NewMessage] = []
    closed: list[ClosedCall] = []
    for call_id, name, arguments in pending:
        execution = executions.get(call_id)
        content: JsonValue
        requested = execution is not None and _open_request(execution) is not None
        moved = False
        if execution is None:
            execution = ToolExecution.objects.create(
                turn_id=turn.pk, tool_call_id=call_id, tool_name=name, arguments=arguments,
                status=ToolStatus.CANCELLED, result=not_executed(reason).for_model(),
                fence=fence, completed_at=Now())
            content, interrupted = not_executed(reason).for_model(), False
        elif (execution.status == ToolStatus.RUNNING and execution.started_at is not None) or (
                execution.status == ToolStatus.PENDING and execution.attempts > 0):
            # A replay-safe call reset to pending by recovery may already have taken effect.
            moved = _interrupt(turn, execution, reason)
            content, interrupted = outcome_unknown().for_model(), True
        elif execution.status in (ToolStatus.PENDING, ToolStatus.RUNNING):
            # Never started: an intent a pause or a hand-back put back, a call parked for
            # approval (each put back with its attempt undone, see Fenced.put_back), or the
            # intent of a call that is not replay-safe whose start was never recorded.
            moved = _close(turn, execution, reason, status=ToolStatus.CANCELLED,
                           result=not_executed(reason).for_model(), attempts=0)
            content, interrupted = not_executed(reason).for_model(), False
            if not moved and execution.status == ToolStatus.RUNNING:  # it started meanwhile
                execution.refresh_from_db()
                moved = _interrupt(turn, execution, reason)
                content, interrupted = outcome_unknown().for_model(), True
        else:
            # Finished but its message is missing cannot happen (both commit together); be safe.
            content = execution.result if execution.status == ToolStatus.COMPLETED else (
                execution.error or not_executed(reason).for_model())
            interrupted = execution.status == ToolStatus.INTERRUPTED
        messages.append(_result(execution.pk, turn, call_id, name, content,
                                metadata={"repair": reason, "interrupted": interrupted},
                                fence=fence))
        closed.append(ClosedCall(call_id, name, execution.pk, interrupted,
                                 approval_cancelled=requested and moved))
    return _with_messages(closed, insert_messages(turn.conversation_id, messages))


__all__ = ["ClosedCall", "InputKeyTaken", "NewMessage", "allocate_sequences", "append_input",
           "build_messages", "insert_messages", "insert_rows", "interrupt_running",
           "keyed_write", "open_tool_calls", "repair", "to_chat", "visible_chat",
           "visible_history"]
