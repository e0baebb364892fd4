"""Deliveries: durable messages between conversations, and waking idle conversations.

A :class:`~turnkit_django.models.Delivery` is created once per store-wide unique key
(:func:`send_message`, completion callbacks ``completion:<turn id>``). Delivering it appends one
user message to the destination under the destination's conversation lock and, when the
destination is idle, creates the continuation turn that will answer it, all in one transaction
(:func:`deliver`). A conversation is busy while any of its turns is pending (submitted or only
prepared), running, waiting or paused; a busy conversation buffers the message: the turn in
progress keeps its frozen input (``context_sequence``) and the next turn consumes every buffered
message at once. A background turn that finishes hands its lane on in its terminal write
(:func:`hand_on`): the next queued turn is rung, or the idle conversation wakes for what it
buffered.

Continuations act for the DESTINATION conversation's principal, never the sender's; the sender's
principal is recorded in the message metadata only. A continuation is submitted to background
execution when the destination's latest turn was a background turn (or it has none yet); after an
inline turn it is left prepared (pending, not submitted) for the application to execute, because
an inline conversation is driven by the application, not by workers.

Lock order: a caller holding a tree lock may deliver or wake (tree lock, then conversation lock);
delivering and waking take no tree lock of their own: a continuation is created submitted in the
write that creates it.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from datetime import datetime
from functools import partial
from typing import TYPE_CHECKING, Any

from ..agents import get_agent
from ..base.serialization import JsonMapping, json_value
from ..base.states import TurnStatus
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from ..store import deliveries, lock_conversation
from ..store.commits import after_commit
from ..store.deliveries import COMPLETION_PREFIX
from ..store.input_checks import require_text
from ..store.reads import conversation_principal, turn_by_id
from ..store.turns import set_options
from .authorization import authorize, is_allowed
from .creation import new_turn
from .submission import dispatch

if TYPE_CHECKING:
    from ..models import Conversation, Delivery, Turn

logger = logging.getLogger("turnkit_django.deliveries")


def send_message(
    source: Conversation,
    destination: Conversation,
    text: str,
    *,
    key: str,
    principal: object,
    source_turn: Turn | None = None,
    deliver_now: bool = True,
) -> Delivery:
    """Send ``text`` from ``source`` to ``destination`` once per ``key``; authorized first.

    With ``deliver_now`` (the default) the message is delivered at once; otherwise maintenance
    (:func:`deliver_pending`) delivers it.
    """
    principal = authorize_send(source, destination, text, principal=principal,
                               source_turn=source_turn)
    return record_send(source, destination, text, key=key, principal=principal,
                       source_turn=source_turn, deliver_now=deliver_now)


def authorize_send(source: Conversation, destination: Conversation, text: str, *,
                   principal: object, source_turn: Turn | None = None) -> object:
    """Check a message and ask the policy for ``send_message`` (outside any transaction);
    return the principal as stored."""
    require_text(text, "a message's text")
    principal = json_value(principal, "principal")
    if source_turn is not None and source_turn.conversation_id != source.pk:
        raise ValueError(f"source turn {source_turn.pk!r} is not a turn of conversation "
                         f"{source.pk!r}")
    authorize("send_message", principal=principal, source_conversation_id=source.pk,
              destination_conversation_id=destination.pk,
              source_turn_id=source_turn.pk if source_turn is not None else None,
              source_principal=source.principal, destination_principal=destination.principal)
    return principal


def record_send(source: Conversation, destination: Conversation, text: str, *, key: str,
                principal: object, source_turn: Turn | None = None,
                deliver_now: bool = True, from_model: bool = False) -> Delivery:
    """Store an authorized message once per ``key`` (and deliver it at once if asked).

    ``from_model``: a model sent it (the ``send_message`` tool), so its continuation joins the
    source turn's tree; the application's messages start new roots, ``source_turn`` or not."""
    payload: dict[str, Any] = {"text": text, "sender_principal": principal}
    if from_model:
        payload["from_model"] = True
    delivery = deliveries.create(
        key=key, destination_id=destination.pk, source_id=source.pk,
        source_turn_id=source_turn.pk if source_turn is not None else None, payload=payload,
    )
    if deliver_now and delivery.delivered_at is None:
        deliver(delivery.pk)
        delivery.refresh_from_db()
    return delivery


def callback_decision(turn: Turn) -> bool | None:
    """Ask the policy whether a finishing turn may send its completion callback; None when it
    has none. Call it before the terminal write's transaction (never under a lock): the policy
    is asked again at completion because a permission can be revoked while the turn runs."""
    destination = (turn.options or {}).get("callback_conversation")
    if turn.submitted_at is None or not destination:
        return None
    return is_allowed("callback", principal=turn.principal, turn_id=turn.pk,
                      destination_conversation_id=destination,
                      destination_principal=conversation_principal(destination))


def completion_callback(turn: Turn, allowed: bool | None) -> Delivery | None:
    """Create the completion callback of a finished submitted turn; call it in the terminal
    write, with the decision :func:`callback_decision` took before it.

    A denial is recorded as ``options["callback_denied"]`` and the turn stays terminal.
    """
    destination = (turn.options or {}).get("callback_conversation")
    if turn.submitted_at is None or not destination:
        return None
    if not allowed:  # denied, or no decision was taken: never ask the policy under a lock
        set_options(turn, callback_denied=True)
        return None
    result = turn.envelope()
    return deliveries.create(
        key=f"{COMPLETION_PREFIX}{turn.pk}", destination_id=destination,
        source_id=turn.conversation_id, source_turn_id=turn.pk,
        payload={"text": json.dumps(result, sort_keys=True, default=str),
                 "sender_principal": turn.principal, "envelope": result},
    )


def finished(turn: Turn, *, callback_allowed: bool | None, locked: bool = False,
             ) -> Delivery | None:
    """Call in the transaction of a submitted turn's terminal write (holding its tree lock).

    Creates the completion callback (as ``callback_allowed`` decided, see
    :func:`callback_decision`) and hands the turn's lane on (:func:`hand_on`, ``locked`` as
    there), so both commit or roll back with the terminal status. The callback is delivered
    after the commit; if this process dies first, maintenance delivers it. Inline turns have
    neither.
    """
    if turn.submitted_at is None:
        return None
    delivery = None
    if (turn.options or {}).get("callback_conversation"):  # its envelope, as just written
        delivery = completion_callback(turn_by_id(turn.pk), callback_allowed)
    hand_on(turn.conversation_id, locked=locked)
    if delivery is not None and delivery.delivered_at is None:
        after_commit(partial(_deliver_later, delivery.pk))
    return delivery


def _deliver_later(delivery_id: str) -> None:
    try:
        deliver(delivery_id)
    except Exception:
        logger.warning("could not deliver %r; maintenance will retry", delivery_id, exc_info=True)


# --------------------------------------------------------------------------- delivering


def deliver(delivery_id: str) -> Delivery:
    """Append the delivery's message to its destination once, then wake the destination.

    Safe to call twice and concurrently: the destination's conversation lock serializes
    deliverers and the second one finds ``delivered_at`` set and changes nothing.
    """
    return deliveries.deliver(delivery_id, _wake_locked).delivery


class _Rotation:
    """Where the last maintenance pass stopped, so a blocked head cannot starve the rest."""

    after: tuple[datetime, str] | None = None


def deliver_pending(limit: int) -> list[str]:
    """Deliver up to ``limit`` pending deliveries (oldest first, rotating); return their ids.

    Reads only pending rows (the partial index on undelivered deliveries). A delivery that fails
    is logged and left pending for a later pass; the next pass starts after the last one tried.
    """
    rows = deliveries.pending_rows(limit, _Rotation.after)
    delivered: list[str] = []
    for created_at, delivery_id in rows:
        _Rotation.after = (created_at, delivery_id)
        try:
            deliver(delivery_id)
        except deliveries.NoSuchDelivery:
            continue
        except Exception:
            logger.exception("could not deliver %r; a later maintenance pass retries", delivery_id)
            continue
        delivered.append(delivery_id)
    if len(rows) < limit:
        _Rotation.after = None
    return delivered


# --------------------------------------------------------------------------- wake


def is_busy(conversation_id: str) -> bool:
    """Whether a turn of the conversation is pending (even unsubmitted), running, waiting or
    paused: its input is frozen, so a delivery now is buffered for the next turn."""
    return deliveries.conversation_busy(conversation_id)


def wake(conversation: Conversation | str) -> Turn | None:
    """Create a continuation for buffered deliveries if the conversation is idle; return it.

    A delivered message is buffered while it lies beyond the input (``context_sequence``) of the
    conversation's newest turn. Takes the conversation lock.
    """
    conversation_id = conversation if isinstance(conversation, str) else conversation.pk
    return deliveries.wake_conversation(conversation_id, _wake_locked)


def hand_on(conversation_id: str, *, locked: bool = False) -> Turn | None:
    """In the transaction that ends a submitted turn: ring the next turn queued in the
    conversation's lane (after the commit) or, when none is queued, wake the conversation for
    its buffered deliveries; return the continuation created, if any.

    ``locked``: the transaction already holds the conversation's row lock (the terminal write
    updated the row), so a delivery cannot commit between the terminal status and this read;
    otherwise the lock is taken first. One read decides, in the common case, that there is
    nothing to wake.
    """
    if not locked:
        lock_conversation(conversation_id)
    following, busy, buffered = deliveries.lane(conversation_id)
    if following is not None:  # the lane is busy: nothing to wake
        dispatch(following)
        return None
    if busy or not buffered:
        return None
    return _wake_locked(lock_conversation(conversation_id))


def handed_on(turn: Turn) -> bool | None:
    """After a submitted turn's terminal write committed on its own (no delivery waited in its
    lane then, see :meth:`~turnkit_django.store.Fenced.hand_off`): ring the lane's next turn,
    or wake the conversation for a delivery that came in since; return whether turns wait for
    ``turn`` (None when the read failed).

    Read after the commit, without a lock: a turn queued before it is seen, and one queued
    after it finds the lane free and is claimed on its own doorbell. One read, compiled once.
    A failure is logged: the turn has ended, and maintenance rings a lane head that lost its
    doorbell and releases what waits.
    """
    try:
        found = deliveries.ended_lane(turn.conversation_id, turn.pk)
        if found is None:
            return None
        following, busy, buffered, waited_for = found
        if following is not None:
            dispatch(following)
        elif buffered and not busy:
            wake(turn.conversation_id)
    except Exception:
        logger.warning("could not hand on the lane of turn %r; maintenance will",
                       turn.pk, exc_info=True)
        return None
    return bool(waited_for)


def _wake_locked(row: Conversation) -> Turn | None:
    """:func:`wake` for a caller that holds the conversation lock."""
    if is_busy(row.pk):
        return None
    latest = deliveries.latest_turn(row.pk)
    consumed = latest["context_sequence"] if latest else 0
    trigger = _trigger(row.pk, consumed)
    if trigger is None:
        return None
    try:
        agent = get_agent(row.agent_name)
    except ConfigurationError:
        logger.warning("conversation %r has buffered deliveries but its agent %r is not "
                       "registered in this process; not waking it", row.pk, row.agent_name)
        return None
    message_id, delivery_id, tree, sender = trigger
    # Created submitted (after a background turn) in the same write: submitting it after would
    # take the tree lock under the conversation lock, the reverse of the lock order.
    return new_turn(agent, conversation=row, principal=row.principal, tree=tree,
                    submit=latest is None or latest["submitted_at"] is not None,
                    options={"woken_by": {"message_id": message_id, "delivery_id": delivery_id},
                             "trace": sender and (sender.options or {}).get("trace")})


def _trigger(conversation: str, consumed: int) -> tuple[str, str, Turn | None, Turn | None] | None:
    """The buffered delivery a continuation answers, its tree (None: a new root), its sender.

    A message a model had a turn send (send_message, a launched child's callback) continues
    the sender's tree: one budget bounds every chain; one from a cancelled tree wakes nothing.
    Application input, including a root's callback (only the application submits a root with
    one), starts a new root: a listener can answer a job that exhausted its budget. With any
    application input buffered the continuation is a new root; else it joins the tree of the
    delivery it answers, the oldest buffered one (``live[0]``, its ``woken_by``).
    """
    buffered = deliveries.buffered_messages(conversation, consumed,
                                            turnkit_settings.MAINTENANCE_BATCH_SIZE)
    senders = deliveries.turns_with_roots(
        {turn_id for _, metadata in buffered if (turn_id := _sender(metadata))})
    found = [(pk, metadata, _in_tree(metadata, senders)) for pk, metadata in buffered]
    live = [item for item in found if not _from_cancelled_tree(item[2])]
    if not live:
        return None
    message_id, metadata, oldest = live[0]
    from_application = any(item[2] is None for item in live)
    tree = None if from_application or oldest is None else oldest.root_turn
    return message_id, str(metadata["delivery_id"]), tree, senders.get(_sender(metadata) or "")


def _sender(metadata: JsonMapping) -> str | None:
    source = metadata.get("source") or {}
    return source.get("turn_id") if isinstance(source, dict) else None


def _in_tree(metadata: JsonMapping, senders: Mapping[str, Turn]) -> Turn | None:
    """The turn whose tree the message continues; None for application input: a message the
    application sent (naming a ``source_turn`` or not), or the completion callback of a root,
    which only the application submits with one."""
    sender = senders.get(_sender(metadata) or "")
    if sender is None:
        return None
    if metadata.get("callback"):
        return None if sender.is_root else sender
    return sender if metadata.get("from_model") else None


def _from_cancelled_tree(sender: Turn | None) -> bool:
    """Its root was cancelled, or the sender by a cascade (of a run that had already ended)."""
    if sender is None:
        return False
    return sender.root_turn.status == TurnStatus.CANCELLED or (
        sender.status == TurnStatus.CANCELLED and bool((sender.options or {}).get(
            "cancel_cascade")))


__all__ = [
    "authorize_send",
    "callback_decision",
    "completion_callback",
    "deliver",
    "deliver_pending",
    "finished",
    "hand_on",
    "handed_on",
    "is_busy",
    "record_send",
    "send_message",
    "wake",
]
