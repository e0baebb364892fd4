"""Use cases: one function each. Admin actions, commands, tasks and handles call these."""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.db.models import Exists, Model, OuterRef
from django.db.models.functions import Now
from django.utils import timezone

from . import store
from .agents import schema_json
from .events import emit
from .exceptions import InvalidTransition
from .ids import new_id
from .messages import Part, ToolResultPart
from .models import Conversation, ToolExecution, Turn
from .prompts import snapshot
from .repair import repair, unknown_result
from .states import ToolStatus, TurnStatus
from .store import NewMessage, insert_messages, lock_tree

if TYPE_CHECKING:
    from .agents import Agent
    from .cancel import CancelReport
    from .models import Delivery

logger = logging.getLogger("turnkit_django.services")


# --------------------------------------------------------------------------- creation


def new_conversation(
    agent: Agent,
    *,
    principal: Any = None,
    context: dict[str, Any] | None = None,
    metadata: dict[str, Any] | None = None,
    subject: Model | None = None,
    model: str | None = None,
    parent: Turn | None = None,
    parent_execution: ToolExecution | None = None,
) -> Conversation:
    fields: dict[str, Any] = {}
    if subject is not None:
        fields["subject_type"] = ContentType.objects.get_for_model(subject)
        fields["subject_id"] = str(subject.pk)
        to_prompt = getattr(subject, "to_prompt", None)
        fields["subject_prompt"] = str(to_prompt() if callable(to_prompt) else subject)
    if parent is not None:
        fields.update(parent_conversation_id=parent.conversation_id, parent_turn=parent,
                      parent_tool_execution=parent_execution)
    return Conversation.objects.create(
        agent_name=agent.name,
        model=model or agent.resolved_model(),
        principal=principal,
        context=snapshot(context or {}, "context"),
        metadata=dict(metadata or {}),
        **fields,
    )


def _thinking(agent: Agent, thinking: Any, prompt_mode: str | None) -> Any:
    """Check a turn's prompt options; return its thinking (own, False for off, or the agent's)."""
    from .agents import check_thinking
    from .prompts import check_options

    check_options(agent.name, prompt_mode, None)
    check_thinking(thinking, f"turn of agent {agent.name!r}")
    return thinking if thinking is not None else agent.thinking


def new_turn(
    agent: Agent,
    parts: Sequence[Part] = (),
    *,
    conversation: Conversation | None = None,
    parent: Turn | None = None,
    parent_execution: ToolExecution | None = None,
    principal: Any = None,
    context: dict[str, Any] | None = None,
    output_schema: Any = None,
    thinking: dict[str, Any] | None = None,
    prompt_mode: str | None = None,
    model: str | None = None,
    message_metadata: dict[str, Any] | None = None,
    **conversation_options: Any,
) -> Turn:
    """Create a pending turn (and its conversation and input message when needed)."""
    with transaction.atomic():
        if conversation is None:
            conversation = new_conversation(
                agent, principal=principal, context=context, parent=parent,
                parent_execution=parent_execution, model=model, **conversation_options,
            )
        if parts:  # its sequence is the last one: the conversation row stays locked until commit
            last = insert_messages(conversation.pk, [NewMessage("user", parts,
                                                                metadata=message_metadata)])[0].sequence
        else:
            last = Conversation.objects.filter(pk=conversation.pk).values_list(
                "last_sequence", flat=True).get()
        turn_id = new_id("turn")
        options: dict[str, Any] = {
            "output_schema": schema_json(output_schema or agent.output_schema),
            "thinking": _thinking(agent, thinking, prompt_mode),
            "prompt_mode": prompt_mode,
            # A deep copy: later changes to the caller's dict never reach the turn.
            "context": snapshot(context if context is not None else conversation.context or {},
                                "context"),
        }
        if parent is None:
            options["limits"] = agent.limits().as_json()
        return Turn.objects.create(
            id=turn_id,
            conversation=conversation,
            agent_name=agent.name,
            parent_turn=parent,
            parent_tool_execution=parent_execution,
            root_turn_id=parent.root_turn_id if parent is not None else turn_id,
            depth=parent.depth + 1 if parent is not None else 0,
            model=model or conversation.model or agent.resolved_model(),
            options=options,
            principal=principal if principal is not None else conversation.principal,
            context_sequence=last,
            deadline_at=parent.deadline_at if parent is not None else None,
        )


# --------------------------------------------------------------------------- background


def _dispatcher() -> Any:
    from .conf import turnkit_settings

    if turnkit_settings.DISPATCHER is not None:
        return turnkit_settings.DISPATCHER
    from .celery import enqueue_turn

    return enqueue_turn


def dispatch(turn_id: str) -> None:
    """Ring the doorbell for ``turn_id`` once the current transaction commits."""

    def send() -> None:
        try:
            _dispatcher()(turn_id)
        except Exception:
            # Celery is only a doorbell: maintenance re-dispatches what was lost.
            logger.warning("could not dispatch turn %r; maintenance will retry", turn_id,
                           exc_info=True)

    transaction.on_commit(send)


def submit(turn: Turn, *, callback: Conversation | None = None) -> Turn:
    """Hand a pending turn to background execution (idempotent).

    A ``callback`` conversation receives the turn's result when it finishes; the ``callback``
    action is authorized for the turn's principal first (and again at completion).
    """
    from .budget import Limits

    if callback is not None:
        from .authorization import authorize

        authorize("callback", principal=turn.principal, turn_id=turn.pk,
                  destination_conversation_id=callback.pk,
                  destination_principal=callback.principal)
    with transaction.atomic():
        lock_tree(turn.root_turn_id)
        row = Turn.objects.get(pk=turn.pk)
        if row.submitted_at is not None:
            return row
        if row.status != TurnStatus.PENDING:
            raise InvalidTransition(row.pk, row.status, "submit")
        from .waits import submit_status

        now = timezone.now()
        fields: dict[str, Any] = {"submitted_at": now, "updated_at": now,
                                  "status": submit_status(row)}
        if callback is not None:
            fields["options"] = dict(row.options, callback_conversation=callback.pk)
        if row.is_root:
            limits = Limits.from_json(row.options["limits"])
            fields["deadline_at"] = limits.deadline(now)
        Turn.objects.filter(pk=row.pk).update(**fields)
        dispatch(row.pk)
    row.refresh_from_db()
    return row


def run_turn(turn_id: str, *, kind: str = "celery") -> bool:
    """Execute a submitted turn if it is claimable (what the Celery task does)."""
    from .runtime import execute

    ran = execute(turn_id, kind=kind)
    if ran:
        dispatch_next_in_lane(turn_id)
        from .deliveries import wake_after

        wake_after(turn_id)  # buffered deliveries get their continuation
    drain()
    return ran


def dispatch_next_in_lane(turn_id: str) -> None:
    """Ring for the oldest pending submitted turn of the conversation that ``turn_id`` left."""
    conversation_id = Turn.objects.filter(pk=turn_id).values_list(
        "conversation_id", flat=True).first()
    following = (
        Turn.objects.filter(conversation_id=conversation_id, status=TurnStatus.PENDING,
                            submitted_at__isnull=False)
        .order_by("submitted_at", "id").values_list("pk", flat=True).first()
    )
    if following is not None:
        dispatch(following)


# --------------------------------------------------------------------------- recovery


@dataclass
class ReconcileReport:
    recovered: list[str] = field(default_factory=list)
    dead_lettered: list[str] = field(default_factory=list)
    stale: list[str] = field(default_factory=list)
    dispatched: list[str] = field(default_factory=list)

    def __str__(self) -> str:
        return (f"recovered {len(self.recovered)}, dead-lettered {len(self.dead_lettered)}, "
                f"stale {len(self.stale)}, dispatched {len(self.dispatched)}")


def _replay_safe_tools(agent_name: str) -> set[str]:
    from .exceptions import ConfigurationError
    from .registry import get_agent

    try:
        agent = get_agent(agent_name)
    except ConfigurationError:
        return set()
    return {name for name, t in agent.tool_table().items() if t.replay_safe}


def _recover(turn_id: str, report: ReconcileReport) -> None:
    from .conf import turnkit_settings

    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    with transaction.atomic():
        row = Turn.objects.filter(pk=turn_id).values("root_turn_id").first()
        if row is None:
            return
        lock_tree(row["root_turn_id"])
        turn = Turn.objects.get(pk=turn_id)
        if turn.status != TurnStatus.RUNNING or (turn.heartbeat_at and turn.heartbeat_at >= cutoff):
            return
        if turn.submitted_at is None:
            repair(turn, reason="the turn was abandoned")
            store.revoke(turn, status=TurnStatus.STALE, reason="abandoned inline turn",
                         completed_at=timezone.now(),
                         error={"type": "Stale", "message": "the inline execution was abandoned"})
            report.stale.append(turn.pk)
            emit("turn.stale", turn_id=turn.pk, conversation_id=turn.conversation_id)
            return
        attempts = turn.recovery_attempts + 1
        replay_safe = _replay_safe_tools(turn.agent_name)
        interrupted = []
        for execution in ToolExecution.objects.filter(turn_id=turn.pk, status=ToolStatus.RUNNING):
            if execution.tool_name in replay_safe:
                ToolExecution.objects.filter(pk=execution.pk, status=ToolStatus.RUNNING).update(
                    status=ToolStatus.PENDING, updated_at=Now())
                continue
            ToolExecution.objects.filter(pk=execution.pk, status=ToolStatus.RUNNING).update(
                status=ToolStatus.INTERRUPTED, error=unknown_result(), completed_at=Now(),
                updated_at=Now())
            interrupted.append(NewMessage(
                "tool",
                [ToolResultPart(execution.tool_call_id, execution.tool_name, unknown_result(),
                                is_error=True)],
                kind="tool_result", turn_id=turn.pk, tool_execution_id=execution.pk,
                metadata={"interrupted": True},
            ))
        insert_messages(turn.conversation_id, interrupted)
        for message in interrupted:
            result = message.parts[0]
            emit("tool_call.interrupted", turn_id=turn.pk, conversation_id=turn.conversation_id,
                 id=getattr(result, "tool_call_id", None), name=getattr(result, "name", None),
                 tool_execution_id=message.tool_execution_id)
        if attempts > int(turnkit_settings.MAX_RECOVERY_ATTEMPTS):
            repair(turn, reason="the turn was dead-lettered")
            error = {"type": "DeadLetter",
                     "message": f"the turn lost its worker {attempts} times; dead-lettered",
                     "recovery_attempts": attempts}
            store.revoke(turn, status=TurnStatus.FAILED, reason="dead-letter",
                         recovery_attempts=attempts, error=error, completed_at=timezone.now())
            from .deliveries import finished

            finished(turn.pk)  # callback and wake commit with the dead-letter
            report.dead_lettered.append(turn.pk)
            emit("turn.failed", turn_id=turn.pk, conversation_id=turn.conversation_id,
                 error=error)
            return
        store.revoke(turn, status=TurnStatus.PENDING, reason="lease expired",
                     recovery_attempts=attempts)
        dispatch(turn.pk)
        report.recovered.append(turn.pk)
        emit("turn.recovered", turn_id=turn.pk, conversation_id=turn.conversation_id,
             recovery_attempts=attempts)


def reconcile() -> ReconcileReport:
    """Recover running turns whose heartbeat is older than LEASE, then run one maintenance pass."""
    from .conf import turnkit_settings

    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    # Heartbeats are stamped with the database's clock, so the lease is measured on it too:
    # a worker host whose clock is skewed can neither be reclaimed early nor recovered late.
    cutoff = database_now() - timedelta(seconds=float(turnkit_settings.LEASE))
    report = ReconcileReport()
    stale_ids = list(
        Turn.objects.filter(status=TurnStatus.RUNNING, heartbeat_at__lt=cutoff)
        .order_by("heartbeat_at").values_list("pk", flat=True)[:batch]
    )
    for turn_id in stale_ids:
        _recover(turn_id, report)
    report.dispatched.extend(drain())
    return report


def release_waiting(batch: int) -> list[str]:
    """Move waiting turns whose targets all finished, or whose deadline passed, to pending."""
    from .models import Wait
    from .states import ACTIVE_TURN_STATUSES
    from .waits import on_release

    released: list[str] = []
    waiting = list(
        Turn.objects.actionable().filter(status=TurnStatus.WAITING).order_by("updated_at")
        .values_list("pk", "root_turn_id")[:batch]
    )
    for turn_id, root_id in waiting:
        with transaction.atomic():
            lock_tree(root_id)
            turn = Turn.objects.filter(pk=turn_id, status=TurnStatus.WAITING).first()
            if turn is None:
                continue
            expired = turn.deadline_at is not None and turn.deadline_at <= timezone.now()
            blocked = Wait.objects.filter(waiter_id=turn_id,
                                          target__status__in=ACTIVE_TURN_STATUSES).exists()
            if expired or not blocked:
                Turn.objects.filter(pk=turn_id).update(status=TurnStatus.PENDING,
                                                       updated_at=Now())
                on_release(turn, expired=expired)
                dispatch(turn_id)
                released.append(turn_id)
            else:
                # Touch it so a blocked batch rotates behind the others (fair rotation).
                Turn.objects.filter(pk=turn_id).update(updated_at=Now())
    return released


def database_now() -> datetime:
    """Return the database server's current time (the clock heartbeats are stamped with)."""
    from django.db import connection

    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT statement_timestamp()")
            return cursor.fetchone()[0]
    return timezone.now()  # SQLite runs in this process: its clock is ours


def drain() -> list[str]:
    """One bounded maintenance pass: release waiters, re-ring turns that lost their doorbell.

    Reads only active rows (the partial actionable index), at most MAINTENANCE_BATCH_SIZE of
    them per query, oldest-touched first, and touches what it handled so the next pass rotates.
    """
    from .conf import turnkit_settings
    from .deliveries import deliver_pending

    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    deliver_pending(batch)
    release_waiting(batch)
    quiet = database_now() - timedelta(seconds=float(turnkit_settings.RECONCILE_INTERVAL))
    # Ring only the head of each conversation's lane: a turn queued behind a busy or older turn
    # cannot be claimed anyway, and the lane hands over to it when its predecessor finishes.
    lane = Turn.objects.filter(conversation_id=OuterRef("conversation_id")).exclude(
        pk=OuterRef("pk"))
    busy = lane.filter(status__in=[TurnStatus.RUNNING, TurnStatus.WAITING, TurnStatus.PAUSED])
    older = lane.filter(status=TurnStatus.PENDING, submitted_at__isnull=False,
                        submitted_at__lt=OuterRef("submitted_at"))
    ids = list(
        Turn.objects.actionable().filter(status=TurnStatus.PENDING, updated_at__lt=quiet)
        .filter(~Exists(busy), ~Exists(older))
        .order_by("updated_at").values_list("pk", flat=True)[:batch]
    )
    if ids:
        with transaction.atomic():
            Turn.objects.filter(pk__in=ids, status=TurnStatus.PENDING).update(updated_at=Now())
            for turn_id in ids:
                dispatch(turn_id)
    return ids


# --------------------------------------------------------------------------- orchestration


def cancel(turn: Turn | str, *, cascade: bool = False, principal: Any = None) -> CancelReport:
    """Cancel a turn (and with ``cascade`` its descendants); see :mod:`turnkit_django.cancel`."""
    from .cancel import cancel as run

    return run(turn.pk if isinstance(turn, Turn) else turn, cascade=cascade, principal=principal)


def cancel_sweep() -> list[str]:
    """Finish cascades: cancel active turns under cascade-cancelled parents (one batch)."""
    from .cancel import sweep

    return sweep()


def send_message(source_conversation: Conversation, destination_conversation: Conversation,
                 text: str, *, key: str, principal: Any, source_turn: Turn | None = None,
                 ) -> Delivery:
    """Send a durable message to another conversation once per key; see :mod:`.deliveries`."""
    from .deliveries import send_message as send

    return send(source_conversation, destination_conversation, text, key=key,
                principal=principal, source_turn=source_turn)


def deliver(delivery_id: str) -> Delivery:
    """Deliver one delivery (idempotent): one message, and a continuation if the destination
    is idle."""
    from .deliveries import deliver as run

    return run(delivery_id)


def add_wait(waiter: Turn, targets: Sequence[Any], **options: Any) -> Turn:
    """Make ``waiter`` run after ``targets`` finish (``principal=`` optional); see :mod:`.waits`."""
    from .waits import add_wait as run

    return run(waiter, targets, **options)


# --------------------------------------------------------------------------- retention


def prune(*, before: Any, batch: int | None = None, dry_run: bool = False) -> int:
    """Delete root conversations idle since ``before`` whose turns are all finished.

    Works in batches of ``batch`` (default MAINTENANCE_BATCH_SIZE) conversations, each in its
    own short transaction; child conversations, turns, messages and tool executions go with
    their root by cascade. Returns how many root conversations were (or would be) deleted.
    """
    from .conf import turnkit_settings
    from .states import ACTIVE_TURN_STATUSES

    size = int(batch or turnkit_settings.MAINTENANCE_BATCH_SIZE)
    candidates = Conversation.objects.filter(
        parent_conversation__isnull=True, updated_at__lt=before
    ).exclude(turns__status__in=ACTIVE_TURN_STATUSES).exclude(
        child_conversations__turns__status__in=ACTIVE_TURN_STATUSES)
    if dry_run:
        return candidates.count()
    total = 0
    while True:
        with transaction.atomic():
            ids = list(candidates.order_by("updated_at").values_list("pk", flat=True)[:size])
            if not ids:
                return total
            Conversation.objects.filter(pk__in=ids).delete()
        total += len(ids)
