"""Coordination tools, opt-in: ``launch_agent``, ``wait_for`` and ``send_message``.

``from turnkit_django.tools import launch_agent, send_message, wait_for`` and list them in an
agent's ``tools``. The runtime executes them itself (they write through the turn's fenced store):

* ``launch_agent(agent, task, callback=False)`` starts one of the calling agent's ``sub_agents``
  as a submitted child turn without joining it, and returns at once with the child's envelope
  (its ``turn_id`` is what ``wait_for`` takes). With ``callback`` the child's result is delivered
  to the calling conversation when it finishes. One child per tool execution, however often the
  call is replayed.
* ``wait_for(turn_ids)`` (background turns only) waits until the listed turns (at most
  :data:`MAX_WAIT_TARGETS`) finish, releasing the worker meanwhile, and returns
  ``{"results": [...]}`` in the requested order. A refused wait (itself, an unsubmitted turn,
  unfinished work of its own conversation, a cycle) is a failed tool result the model reads.
* ``send_message(conversation_id, text)`` sends a durable message to another conversation. Its
  delivery key is derived from the tool execution, so a replay never sends twice.

An id longer than any id column (:data:`~turnkit_django.base.ids.ID_LENGTH`) or an agent name over
64 characters names nothing: it is refused as invalid arguments, never echoed back.

Every one of them acts for the turn's principal, never for anything the model puts in its
arguments (the argument schemas forbid extra fields): the policy is asked for ``launch_agent``
(and ``callback``), ``wait`` and ``send_message`` with that principal.
"""

from __future__ import annotations

from typing import Annotated, ClassVar

from pydantic import BaseModel, ConfigDict, Field, field_validator

from ..base.ids import ID_LENGTH
from .tool import NAME_LENGTH, Tool, ToolContext

#: The most turns one ``wait_for`` call may name: each is checked for a cycle under the
#: store-wide wait-graph lock, and each result goes back to the model.
MAX_WAIT_TARGETS = 100


class CoordinationTool(Tool):
    """A tool the runtime runs itself, with the turn's claim (see
    :mod:`turnkit_django.runtime.coordination`)."""

    builtin: ClassVar[str | None] = "coordination"
    recovery = "replay_safe"  # every effect is keyed by the tool execution

    def call(self, ctx: ToolContext, args: BaseModel) -> object:  # pragma: no cover - runtime
        raise NotImplementedError(f"{self.tool_name} is executed by the turnkit runtime")


class LaunchArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    agent: str = Field(max_length=NAME_LENGTH, description="The name of one of your sub-agents.")
    task: str = Field(min_length=1, description="The complete task for the sub-agent; it sees "
                                                "nothing else.")
    callback: bool = Field(False, description="Deliver its result to this conversation when it "
                                              "finishes.")

    @field_validator("task")
    @classmethod
    def _task_has_text(cls, task: str) -> str:
        # The child's only input: a blank one is a request providers refuse (as child_task
        # refuses it for a sub-agent tool).
        if not task.strip():
            raise ValueError("the task is blank; write out the complete task for the sub-agent")
        return task


class LaunchAgent(CoordinationTool):
    """Start one of your sub-agents in the background without waiting for it.

    Returns its turn id at once; pass it to wait_for to get its result later, or ask for a
    callback to receive the result in this conversation when it finishes.
    """

    name = "launch_agent"
    Args = LaunchArgs


class WaitArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    turn_ids: list[Annotated[str, Field(max_length=ID_LENGTH)]] = Field(
        min_length=1, max_length=MAX_WAIT_TARGETS,
        description="The turns to wait for, in the order you want their results.")


class WaitFor(CoordinationTool):
    """Wait until the given turns have finished, then get their results in the order asked.

    Only in background turns. Takes turn ids such as those launch_agent returns.
    """

    name = "wait_for"
    Args = WaitArgs


class SendArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    conversation_id: str = Field(max_length=ID_LENGTH,
                                 description="The conversation to send the message to.")
    text: str = Field(min_length=1, description="The message.")


class SendMessage(CoordinationTool):
    """Send a message to another conversation; its agent answers it in a turn of its own."""

    name = "send_message"
    Args = SendArgs


launch_agent = LaunchAgent()
wait_for = WaitFor()
send_message = SendMessage()

__all__ = ["MAX_WAIT_TARGETS", "CoordinationTool", "LaunchAgent", "SendMessage", "WaitFor",
           "launch_agent", "send_message", "wait_for"]
