"""Coordination tools, opt-in: ``launch_agent``, ``wait_for`` and ``send_message``.

``from turnkit_django.tools import launch_agent, send_message, wait_for`` and list them in an
agent's ``tools``. The runtime executes them itself (they write through the turn's fenced store):

* ``launch_agent(agent, task, callback=False)`` starts one of the calling agent's ``sub_agents``
  as a submitted child turn without joining it, and returns at once with the child's envelope
  (its ``turn_id`` is what ``wait_for`` takes). With ``callback`` the child's result is delivered
  to the calling conversation when it finishes. One child per tool execution, however often the
  call is replayed.
* ``wait_for(turn_ids)`` (background turns only) waits until the listed turns finish, releasing
  the worker meanwhile, and returns ``{"results": [...]}`` in the requested order. A refused wait
  (itself, an unsubmitted turn, unfinished work of its own conversation, a cycle) is a failed
  tool result the model reads.
* ``send_message(conversation_id, text)`` sends a durable message to another conversation. Its
  delivery key is derived from the tool execution, so a replay never sends twice.

Every one of them acts for the turn's principal, never for anything the model puts in its
arguments (the argument schemas forbid extra fields): the policy is asked for ``launch_agent``
(and ``callback``), ``wait`` and ``send_message`` with that principal.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING, Any, ClassVar

from pydantic import BaseModel, ConfigDict, Field

from ..states import ToolStatus
from .base import Tool, ToolContext

if TYPE_CHECKING:
    from ..messages import ToolCallPart
    from ..models import ToolExecution
    from ..runtime import Execution

logger = logging.getLogger("turnkit_django.tools")
Outcome = tuple[str, Any, dict[str, Any] | None]


def _failed(error: str, message: str) -> Outcome:
    return ToolStatus.FAILED, {"error": error, "message": message}, None


class CoordinationTool(Tool):
    """A tool the runtime runs with the turn's execution (its fenced store and its claim)."""

    builtin: ClassVar[str | None] = "coordination"
    recovery = "replay_safe"  # every effect is keyed by the tool execution

    def call(self, ctx: ToolContext, args: Any) -> Any:  # pragma: no cover - runtime runs it
        raise NotImplementedError(f"{self.tool_name} is executed by the turnkit runtime")

    def execute(self, ex: Execution, call: ToolCallPart, execution: ToolExecution,
                args: Any) -> Outcome:
        """Run the tool; an unexpected error is a failed tool result, as for any tool."""
        from ..exceptions import BudgetExceeded, LostClaim
        from ..runtime import Suspended

        try:
            return self.run(ex, call, execution, args)
        except (LostClaim, Suspended, BudgetExceeded):
            raise
        except Exception as exc:
            return _failed(type(exc).__name__, str(exc))

    def run(self, ex: Execution, call: ToolCallPart, execution: ToolExecution,
            args: Any) -> Outcome:
        raise NotImplementedError


# --------------------------------------------------------------------------- launch_agent


class LaunchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(description="The name of one of your sub-agents.")
    task: str = Field(description="The complete task for the sub-agent; it sees nothing else.")
    callback: bool = Field(False, description="Deliver its result to this conversation when it "
                                              "finishes.")


class LaunchAgent(CoordinationTool):
    """Start one of your sub-agents in the background without waiting for it.

    Returns its turn id at once; pass it to wait_for to get its result later, or ask for a
    callback to receive the result in this conversation when it finishes.
    """

    name = "launch_agent"
    Args = LaunchArgs

    def run(self, ex: Execution, call: ToolCallPart, execution: ToolExecution,
            args: Any) -> Outcome:
        from ..exceptions import AuthorizationError, BudgetExceeded
        from ..models import Turn
        from ..services import submit
        from ..subagents import create_child, envelope, launch_refusal

        agents = {agent.name: agent for agent in ex.agent.sub_agents}
        agent = agents.get(args.agent)
        if agent is None:
            known = ", ".join(sorted(agents)) or "none"
            return _failed("unknown_agent", f"There is no sub-agent {args.agent!r}. Agents you "
                                            f"can launch: {known}.")
        refusal = launch_refusal(ex, agent.name, call.arguments)
        if refusal is not None:
            return ToolStatus.FAILED, refusal, None
        child = Turn.objects.filter(parent_tool_execution_id=execution.pk).first()
        if child is None:
            try:
                with ex.fenced.atomic():  # submit() asks for the callback; a denial rolls back
                    child = submit(create_child(ex, agent, execution, args.task),
                                   callback=ex.conversation if args.callback else None)
            except AuthorizationError:
                return _failed("not_authorized", "You are not allowed to ask for a callback "
                                                 "into this conversation.")
            except BudgetExceeded as exc:
                ex.deferred_error = exc
                return _failed("budget_exceeded", exc.reason)
            ex.emit("sub_agent.delegated", id=call.id, name=agent.name, child_turn_id=child.pk,
                    child_conversation_id=child.conversation_id, task_chars=len(args.task),
                    background=True)
        return ToolStatus.COMPLETED, {**envelope(child), "callback": args.callback}, None


# --------------------------------------------------------------------------- wait_for


class WaitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turn_ids: list[str] = Field(min_length=1, description="The turns to wait for, in the order "
                                                          "you want their results.")


class WaitFor(CoordinationTool):
    """Wait until the given turns have finished, then get their results in the order asked.

    Only in background turns. Takes turn ids such as those launch_agent returns.
    """

    name = "wait_for"
    Args = WaitArgs

    def run(self, ex: Execution, call: ToolCallPart, execution: ToolExecution,
            args: Any) -> Outcome:
        from ..authorization import is_allowed
        from ..exceptions import WaitError
        from ..fanout import add_edges, suspend
        from ..models import Turn
        from ..runtime import Suspended
        from ..subagents import envelope

        if not ex.background:
            return _failed("not_available", "wait_for works only in background turns; this "
                                            "turn runs inline.")
        ids = list(dict.fromkeys(args.turn_ids))
        owners = dict(Turn.objects.filter(pk__in=ids).values_list("pk", "principal"))
        if not is_allowed("wait", principal=ex.row.principal, turn_id=ex.row.pk,
                          target_ids=ids, turn_principal=ex.row.principal,
                          target_principals=[owners.get(pk) for pk in ids]):
            return _failed("not_authorized", "You are not allowed to wait for these turns.")
        try:
            with ex.fenced.atomic():
                found = Turn.objects.in_bulk(ids)
                missing = [pk for pk in ids if pk not in found]
                if missing:
                    raise WaitError(f"there is no turn {missing[0]!r}")
                add_edges(ex.row, [found[pk] for pk in ids])
        except WaitError as exc:
            return _failed("wait_refused", f"Cannot wait: {exc}.")
        if suspend(ex, ids, pending_execution=execution.pk):
            raise Suspended(ex.row.pk)
        rows = Turn.objects.in_bulk(ids)  # all finished: suspend() found none active
        return ToolStatus.COMPLETED, {"results": [envelope(rows[pk]) for pk in ids]}, None


# --------------------------------------------------------------------------- send_message


class SendArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    conversation_id: str = Field(description="The conversation to send the message to.")
    text: str = Field(min_length=1, description="The message.")


class SendMessage(CoordinationTool):
    """Send a message to another conversation; its agent answers it in a turn of its own."""

    name = "send_message"
    Args = SendArgs

    def run(self, ex: Execution, call: ToolCallPart, execution: ToolExecution,
            args: Any) -> Outcome:
        from ..deliveries import deliver
        from ..deliveries import send_message as send
        from ..exceptions import AuthorizationError
        from ..models import Conversation

        destination = Conversation.objects.filter(pk=args.conversation_id).first()
        if destination is None:
            return _failed("unknown_conversation",
                           f"There is no conversation {args.conversation_id!r}.")
        try:
            with ex.fenced.atomic():
                delivery = send(ex.conversation, destination, args.text,
                                key=f"turnkit:send:{execution.pk}", principal=ex.row.principal,
                                source_turn=ex.row, deliver_now=False)
        except AuthorizationError:
            return _failed("not_authorized", "You are not allowed to send a message to "
                                             f"conversation {destination.pk!r}.")
        if delivery.delivered_at is None:
            try:
                delivery = deliver(delivery.pk)
            except Exception:  # it is stored: maintenance delivers it
                logger.warning("could not deliver %r yet", delivery.pk, exc_info=True)
        return ToolStatus.COMPLETED, {"delivery_id": delivery.pk,
                                      "conversation_id": destination.pk,
                                      "delivered": delivery.delivered_at is not None}, None


launch_agent = LaunchAgent()
wait_for = WaitFor()
send_message = SendMessage()

__all__ = ["CoordinationTool", "LaunchAgent", "SendMessage", "WaitFor", "launch_agent",
           "send_message", "wait_for"]
