"""Running the coordination tools (``launch_agent``, ``wait_for``, ``send_message``).

The tools are declared in :mod:`turnkit_django.tools.coordination`; the runtime executes them
itself because they write through the turn's claim. Every one of them acts for the turn's
principal, never for anything the model puts in its arguments (the argument schemas forbid
extra fields): the policy is asked for ``launch_agent`` (and ``callback``), ``wait`` and
``send_message`` with that principal.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base.error_records import ErrorRecord, budget_exceeded, not_authorized
from ..base.ids import new_id
from ..base.states import ToolStatus
from ..exceptions import AuthorizationError, BudgetExceeded, LostClaim, WaitError
from ..messages import ToolCallPart
from ..store.deliveries import TOOL_PREFIX, delivery_by_key
from ..store.reads import conversation_by_id, turn_principals, turns_by_id
from ..store.waits import add_edges
from ..tools.coordination import CoordinationTool, LaunchAgent, SendMessage, WaitFor
from .authorization import is_allowed
from .calls import CallOutcome
from .context import ControlPending, Suspended, TurnContext
from .delegation import child_of, create_child, launch_refusal
from .deliveries import authorize_send, deliver, record_send
from .fanout import suspend
from .submission import authorize_callback, submit

if TYPE_CHECKING:
    from ..models import ToolExecution

logger = logging.getLogger("turnkit_django.tools")

Executor = Callable[[TurnContext, ToolCallPart, "ToolExecution", Any], CallOutcome]


def _failed(code: str, message: str) -> CallOutcome:
    return CallOutcome.failed(ErrorRecord(code, message))


def launch(ctx: TurnContext, call: ToolCallPart, execution: ToolExecution,
           args: Any) -> CallOutcome:
    """``launch_agent``: start a sub-agent as a submitted child, without joining it."""
    child = child_of(execution)
    if child is not None:  # a replay: the launch was decided (and authorized) when it ran
        return CallOutcome(ToolStatus.COMPLETED, {**child.envelope(), "callback": args.callback})
    agents = {agent.name: agent for agent in ctx.agent.sub_agents}
    agent = agents.get(args.agent)
    if agent is None:
        known = ", ".join(sorted(agents)) or "none"
        return _failed("unknown_agent", f"There is no sub-agent {args.agent!r}. Agents you can "
                                        f"launch: {known}.")
    refusal = launch_refusal(ctx, agent.name, call.arguments)
    if refusal is not None:
        return CallOutcome.failed(refusal)
    child_id = new_id("turn")
    try:
        if args.callback:  # asked before the transaction, for the child to be
            authorize_callback(child_id, ctx.principal, ctx.conversation)
        with ctx.fenced.atomic():
            child = submit(create_child(ctx, agent, execution, args.task, turn_id=child_id),
                           callback=ctx.conversation if args.callback else None,
                           callback_authorized=True)
    except AuthorizationError:
        return CallOutcome.failed(not_authorized(
            "You are not allowed to ask for a callback into this conversation."))
    except BudgetExceeded as exc:
        return CallOutcome.failed(budget_exceeded(exc.reason), error=exc)
    ctx.emit("sub_agent.delegated", id=call.id, name=agent.name, child_turn_id=child.pk,
             child_conversation_id=child.conversation_id, task_chars=len(args.task),
             background=True)
    return CallOutcome(ToolStatus.COMPLETED, {**child.envelope(), "callback": args.callback})


def wait(ctx: TurnContext, call: ToolCallPart, execution: ToolExecution,
         args: Any) -> CallOutcome:
    """``wait_for``: suspend until the turns finish, then return their results in order."""
    if not ctx.background:
        return _failed("not_available", "wait_for works only in background turns; this turn "
                                        "runs inline.")
    ids = list(dict.fromkeys(args.turn_ids))
    owners = turn_principals(ids)
    if not is_allowed("wait", principal=ctx.principal, turn_id=ctx.row.pk, target_ids=ids,
                      turn_principal=ctx.principal,
                      target_principals=[owners.get(pk) for pk in ids]):
        return CallOutcome.failed(not_authorized("You are not allowed to wait for these turns."))
    try:
        with ctx.fenced.atomic():
            found = turns_by_id(ids)
            missing = [pk for pk in ids if pk not in found]
            if missing:
                raise WaitError(f"there is no turn {missing[0]!r}")
            add_edges(ctx.row, [found[pk] for pk in ids])
    except WaitError as exc:
        return _failed("wait_refused", f"Cannot wait: {exc}.")
    if suspend(ctx, ids, pending_execution=execution.pk):
        raise Suspended(ctx.row.pk)
    rows = turns_by_id(ids)  # all finished: suspend() found none active
    return CallOutcome(ToolStatus.COMPLETED, {"results": [rows[pk].envelope() for pk in ids]})


def send(ctx: TurnContext, call: ToolCallPart, execution: ToolExecution,
         args: Any) -> CallOutcome:
    """``send_message``: a durable message to another conversation, keyed by the execution."""
    key = f"{TOOL_PREFIX}send:{execution.pk}"
    delivery = delivery_by_key(key)
    if delivery is None:  # else a replay: the message was authorized and stored when it ran
        destination = conversation_by_id(args.conversation_id)
        refused = CallOutcome.failed(not_authorized(
            f"You are not allowed to send a message to conversation {args.conversation_id!r}."))
        if destination is None:
            # Asked like any destination, its owner unknown: the policy's refusal reads the
            # same whether the id exists or not, so a model cannot probe for conversations.
            if not is_allowed("send_message", principal=ctx.principal,
                              source_conversation_id=ctx.conversation.pk,
                              destination_conversation_id=args.conversation_id,
                              source_turn_id=ctx.row.pk,
                              source_principal=ctx.conversation.principal,
                              destination_principal=None):
                return refused
            return _failed("unknown_conversation", f"There is no conversation "
                                                   f"{args.conversation_id!r}.")
        try:
            principal = authorize_send(ctx.conversation, destination, args.text,
                                       principal=ctx.principal, source_turn=ctx.row)
        except AuthorizationError:
            return refused
        with ctx.fenced.atomic():
            delivery = record_send(ctx.conversation, destination, args.text, key=key,
                                   principal=principal, source_turn=ctx.row, deliver_now=False,
                                   from_model=True)
    if delivery.delivered_at is None:
        try:
            delivery = deliver(delivery.pk)
        except Exception:  # it is stored: maintenance delivers it
            logger.warning("could not deliver %r yet", delivery.pk, exc_info=True)
    return CallOutcome(ToolStatus.COMPLETED, {
        "delivery_id": delivery.pk, "conversation_id": delivery.destination_conversation_id,
        "delivered": delivery.delivered_at is not None})


EXECUTORS: dict[type[CoordinationTool], Executor] = {
    LaunchAgent: launch, WaitFor: wait, SendMessage: send}


def execute(ctx: TurnContext, tool: CoordinationTool, call: ToolCallPart,
            execution: ToolExecution, args: Any) -> CallOutcome:
    """Run a coordination tool; an unexpected error is a failed tool result, as for any tool."""
    try:
        return EXECUTORS[type(tool)](ctx, call, execution, args)
    except (LostClaim, Suspended, BudgetExceeded, ControlPending):
        raise
    except Exception as exc:
        return _failed(type(exc).__name__, str(exc))


__all__ = ["EXECUTORS", "execute"]
