"""Creating conversations and turns, and the named transitions that change a turn's status.

:func:`apply_transition` is the only statement that changes ``Turn.status``: a compare-and-set
from the transition's source statuses (:data:`turnkit_django.base.states.TRANSITIONS`); a turn in
any other status raises :class:`InvalidTransition` and nothing is written.
"""

from __future__ import annotations

from collections.abc import Sequence
from contextlib import nullcontext
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any, NoReturn

from django.contrib.contenttypes.models import ContentType
from django.db import connection, transaction
from django.db.models import Exists, Model, OuterRef, QuerySet
from django.db.models.functions import Now

from ..base.ids import new_id
from ..base.serialization import JsonMapping, JsonObject, JsonValue
from ..base.states import TRANSITIONS, TurnStatus
from ..exceptions import InvalidTransition
from ..messages import Part
from ..models import Conversation, Event, ToolExecution, Turn, Wait
from . import leases
from .compiled import CompiledRead
from .events import message_events
from .limits import Limits
from .locks import database_now, lock_tree
from .row_reader import adopt, converted, reload, row_columns
from .sql import Unsupported
from .transcript import ClosedCall, NewMessage, build_messages, insert_rows, repair
from .turn_columns import TurnFields
from .turn_statements import insert_claimed, submit_write, transition_write
from .waits import submit_status


def apply_transition(turn_id: str, name: str, *, expected_fence: int | None = None,
                     **fields: object) -> None:
    """Move ``turn_id`` along transition ``name``, writing ``fields`` with the status.

    Raises InvalidTransition (writing nothing) when the turn is not in one of the transition's
    source statuses, or, with ``expected_fence``, holds another fence.
    """
    if connection.vendor == "postgresql":
        try:
            if not transition_write(turn_id, name, fields, expected_fence):
                refuse_transition(turn_id, name)
            return
        except Unsupported:
            pass  # an expression only the ORM writes
    transition = TRANSITIONS[name]
    rows = Turn.objects.filter(pk=turn_id, status__in=[str(s) for s in transition.sources])
    if expected_fence is not None:
        rows = rows.filter(fence=expected_fence)
    with transaction.atomic() if leases.ends(name) else nullcontext():
        if not rows.update(status=transition.target, **fields):
            refuse_transition(turn_id, name)
        if leases.ends(name):
            leases.drop(turn_id)


def refuse_transition(turn_id: str, name: str) -> NoReturn:
    """Raise InvalidTransition for transition ``name`` of ``turn_id``, naming its status."""
    current = Turn.objects.filter(pk=turn_id).values_list("status", flat=True).first()
    raise InvalidTransition(turn_id, current or "missing", name)


# --------------------------------------------------------------------------- creation


@dataclass(frozen=True)
class NewConversation:
    agent_name: str
    model: str
    principal: JsonValue = None
    context: JsonObject = field(default_factory=dict)
    metadata: JsonObject = field(default_factory=dict)
    subject: Model | None = None
    subject_prompt: str = ""
    parent: Turn | None = None
    parent_execution: ToolExecution | None = None


def build_conversation(spec: NewConversation) -> Conversation:
    """The row of a new conversation, unsaved."""
    fields: dict[str, object] = {}  # the conversation's origin: Model instances and ids
    if spec.subject is not None:
        fields.update(subject_type=ContentType.objects.get_for_model(spec.subject),
                      subject_id=str(spec.subject.pk), subject_prompt=spec.subject_prompt)
    if spec.parent is not None:
        fields.update(parent_conversation_id=spec.parent.conversation_id,
                      parent_turn=spec.parent, parent_tool_execution=spec.parent_execution)
    return Conversation(agent_name=spec.agent_name, model=spec.model, principal=spec.principal,
                        context=spec.context, metadata=spec.metadata, **fields)


def create_conversation(spec: NewConversation) -> Conversation:
    conversation = build_conversation(spec)
    conversation.save(force_insert=True)
    return conversation


@dataclass(frozen=True)
class NewTurn:
    """A turn to create. ``None`` fields default to the conversation's (model, principal,
    context); ``options`` is the write-once configuration (``context`` is added to it)."""

    agent_name: str
    options: JsonObject
    model: str | None = None
    principal: JsonValue = None
    context: JsonObject | None = None
    parent: Turn | None = None
    parent_execution: ToolExecution | None = None
    #: A root-level task of an existing tree (no parent): it shares that root's budget and
    #: deadline, and a cascade cancel of the root reaches it.
    tree: Turn | None = None
    #: The new turn's id, when the caller needed it before the turn existed (to ask a policy).
    id: str | None = None
    tenant: str | None = None  #: its principal's TENANT_LIMITS key (None: no tenant limit)


def create_turn(spec: NewTurn, conversation: Conversation, parts: Sequence[Part] = (), *,
                message_metadata: JsonMapping | None = None, message_key: str | None = None,
                submit: bool = False) -> Turn:
    """Create a pending turn over ``conversation`` (saved first when it is new), with
    ``parts`` as its new user input (idempotent by ``message_key``).

    With ``submit``, a root or a continuation joining a tree is handed to background execution
    as it is created (what :func:`submit` writes for a turn without waits or callback, with no
    tree lock: a wake holds the conversation lock); the caller rings its doorbell."""
    if submit and spec.parent is not None:
        raise ValueError("a child turn is submitted by its launch, not created submitted")
    message = None
    if parts:
        message = build_messages(conversation.pk, [NewMessage(
            "user", parts, metadata=message_metadata, key=message_key)])[0]
    if connection.vendor == "postgresql":  # one statement
        turn = build_turn(spec, conversation, 0)  # its input's sequence comes back
        lifetime = _lifetime(turn) if submit else None
        events = [] if message is None else message_events(turn.root_turn_id, turn.pk, [message])
        now, sequence = insert_claimed(conversation, message, turn, None, lifetime, events,
                                       submitted=submit)
        if submit:
            _submitted_at(turn, now)
    else:
        with transaction.atomic(savepoint=False):
            if conversation._state.adding:
                conversation.save(force_insert=True)
            if message is not None:  # its sequence is the last one: the row stays locked
                sequence = insert_rows(conversation.pk, [message])[0].sequence
            else:
                sequence = Conversation.objects.filter(pk=conversation.pk).values_list(
                    "last_sequence", flat=True).get()
            turn = build_turn(spec, conversation, sequence)
            if submit:
                now = database_now()
                _submitted_at(turn, now)
            turn.save(force_insert=True)
            if submit:  # saving stamped updated_at with this process's clock
                Turn.objects.filter(pk=turn.pk).update(updated_at=now)
                turn.updated_at = now
            if message is not None:  # the stream of the turn's tree shows its input
                Event.objects.bulk_create(message_events(turn.root_turn_id, turn.pk, [message]))
    if message is not None:
        message.sequence = sequence
    turn.context_sequence = sequence
    return turn


def _submitted_at(turn: Turn, now: datetime) -> None:
    """The fields a root turn's submit writes, from the database clock's ``now``."""
    lifetime = _lifetime(turn)
    turn.submitted_at, turn.updated_at = now, now
    turn.deadline_at = None if lifetime is None else now + lifetime


def build_turn(spec: NewTurn, conversation: Conversation, sequence: int) -> Turn:
    """The row of a new pending turn whose input ends at ``sequence``, unsaved."""
    turn_id = spec.id or new_id("turn")
    parent, above = spec.parent, spec.parent if spec.parent is not None else spec.tree
    context = spec.context if spec.context is not None else conversation.context or {}
    return Turn(
        id=turn_id,
        conversation=conversation,
        agent_name=spec.agent_name,
        parent_turn=parent,
        parent_tool_execution=spec.parent_execution,
        root_turn_id=above.root_turn_id if above is not None else turn_id,
        depth=parent.depth + 1 if parent is not None else 0,
        model=spec.model or conversation.model,
        options={**spec.options, "context": context},
        principal=spec.principal if spec.principal is not None else conversation.principal,
        tenant=spec.tenant,
        context_sequence=sequence,
        deadline_at=above.deadline_at if above is not None else None,
    )


# --------------------------------------------------------------------------- transitions


def submit(turn: Turn, *, callback_conversation_id: str | None = None) -> tuple[Turn, bool]:
    """Hand a pending turn to background execution once; return it and whether it was new.

    Under the tree lock: ``submitted_at`` is set once, the callback recorded, and the turn goes
    to ``pending`` (waits met; their results are given to it now) or ``waiting``. The caller
    rings the doorbell when it was new. On PostgreSQL a root turn without a callback is first
    submitted by one guarded update (:func:`.turn_statements.submit_write`), which takes the
    same row lock; the lock's path decides whatever that guard does not hold for.
    """
    if turn.is_root and callback_conversation_id is None and connection.vendor == "postgresql":
        # The common case, one statement: a root without waits, submitted once.
        written = submit_write(turn.pk, turn.options, _lifetime(turn), row_columns(Turn))
        if written is not None:
            return Turn.from_db(connection.alias, TURN_FIELDS, converted(Turn, written)), True
    with transaction.atomic():
        if turn.is_root:  # its own row is the tree lock: locked and read in one statement
            found = _SUBMITTED_ROOT.rows(turn.pk)
        else:
            lock_tree(turn.root_turn_id)
            found = _SUBMITTED.rows(turn.pk)
        if not found:
            raise Turn.DoesNotExist(f"turn {turn.pk!r} does not exist")
        *values, now, has_waits = found[0]  # the database clock: lanes and deadlines
        row = Turn.from_db("default", TURN_FIELDS, values)
        if row.submitted_at is not None:
            return row, False
        if row.status not in TRANSITIONS["submit"].sources:
            raise InvalidTransition(row.pk, row.status, "submit")
        fields: TurnFields = {"submitted_at": now, "updated_at": now}
        if callback_conversation_id is not None:
            fields["options"] = dict(row.options, callback_conversation=callback_conversation_id)
        if row.is_root:
            lifetime = _lifetime(row)
            fields["deadline_at"] = None if lifetime is None else now + lifetime
        status = submit_status(row, has_waits=has_waits)
        name = "wait" if status == TurnStatus.WAITING else "submit"
        apply_transition(row.pk, name, **fields)
    if has_waits:  # joining its targets' results wrote its state and input
        row.refresh_from_db()
    else:
        for attname, value in fields.items():
            setattr(row, attname, value)
        row.status = TRANSITIONS[name].target
    return row, True


def _submitted(lock: bool) -> CompiledRead:
    """The read of :func:`submit`: the row, the database clock, whether it has waits."""
    def build(turn_id: str) -> QuerySet[Turn, tuple[Any, ...]]:
        rows = Turn.objects.select_for_update(no_key=True) if lock else Turn.objects.all()
        return rows.filter(pk=turn_id).annotate(
            db_now=Now(), has_waits=Exists(Wait.objects.filter(waiter_id=OuterRef("pk")))
        ).values_list(*TURN_FIELDS, "db_now", "has_waits")
    return CompiledRead(build, 1)


#: A turn row's columns (attribute names), in the order compiled reads select them.
TURN_FIELDS = tuple(f.attname for f in Turn._meta.concrete_fields)
_SUBMITTED_ROOT, _SUBMITTED = _submitted(True), _submitted(False)


def _lifetime(row: Turn) -> timedelta | None:
    raw = (row.options or {}).get("limits")
    return None if raw is None else Limits.from_json(raw).lifetime


def revoke(turn: Turn, transition: str, *, reason: str, at: datetime | None = None,
           **fields: object) -> int:
    """Fence out any worker of ``turn`` and move it along ``transition``; return the new fence.

    The fence log records the conversation's last sequence at this point, so the invariant
    checker can prove that no message written under the revoked fence came after it (I4).
    The caller holds the tree lock.
    """
    last = Conversation.objects.filter(pk=turn.conversation_id).values_list(
        "last_sequence", flat=True).first()
    log = [*(turn.fence_log or []), {"fence": turn.fence, "revoked_after_sequence": last,
                                     "reason": reason,
                                     "at": (at or database_now()).isoformat()}]
    fence = turn.fence + 1
    apply_transition(turn.pk, transition, expected_fence=turn.fence, **{
        "fence": fence, "claimed_by": "", "fence_log": log, "updated_at": Now(), **fields})
    return fence


def end(turn: Turn, transition: str, *, reason: str, error: JsonObject,
        repair_reason: str, **fields: object) -> list[ClosedCall]:
    """End a turn another process may be executing: close its open tool calls, fence it out,
    and move it along ``transition`` (cancel, dead-letter, abandon) with ``error``.

    Updates ``turn`` in memory and returns the calls the repair closed. Caller holds the tree
    lock.
    """
    closed = repair(turn, reason=repair_reason)
    at = database_now()
    fields = {"completed_at": at, "error": error, **fields}
    turn.fence = revoke(turn, transition, reason=reason, at=at, **fields)
    for name, value in fields.items():
        setattr(turn, name, value)
    turn.status, turn.claimed_by = TRANSITIONS[transition].target, ""
    return closed


def count_recovery(turn: Turn, attempts: int) -> None:
    """Record a recovery attempt that did not get as far as revoking the turn."""
    Turn.objects.filter(pk=turn.pk).update(recovery_attempts=attempts)
    turn.recovery_attempts = attempts


def release(turn: Turn) -> None:
    """A waiting turn goes back to pending (maintenance: its targets finished)."""
    apply_transition(turn.pk, "release", updated_at=Now())


def touch(turn_ids: Sequence[str]) -> None:
    """Mark turns as just inspected, so the next maintenance pass looks at others first."""
    Turn.objects.filter(pk__in=list(turn_ids)).update(updated_at=Now())


def set_options(turn: Turn, **changes: JsonValue) -> None:
    """Add to a turn's options (marks such as ``cancel_cascade`` or ``callback_denied``)."""
    turn.options = {**(turn.options or {}), **changes}
    Turn.objects.filter(pk=turn.pk).update(options=turn.options)


__all__ = ["NewConversation", "NewTurn", "adopt", "apply_transition", "build_conversation",
           "build_turn", "create_conversation", "create_turn", "end", "refuse_transition",
           "release", "reload", "revoke", "row_columns", "set_options", "submit", "touch"]
