"""The tools phase of a claimed turn: every tool call of the persisted response to one result.

Calls run in order, each outside any transaction. A call's *intent* (its execution row,
``running``, with a root-wide tool slot reserved) commits before its side effect starts, and its
result (compare-and-set of the execution plus exactly one ``tool_result`` message) commits after.
To keep one commit per step, the intent of a call is written by the transaction before it: the
one recording the model response (first call) or the previous call's result (later calls). The
result of the last call of a batch commits with what follows it: the move to the ``model`` phase
with the next iteration reserved (see :func:`~turnkit_django.budget.reserve_next`), or, after a
terminal tool, the "not executed" results of the calls after it and the move to ``output``.

Being pessimistic about that gap is deliberate (P4 stays intact): a worker that dies after such
a commit but before the tool actually started leaves the execution ``running``, so recovery
reports "outcome unknown" for a tool that is not replay-safe, and re-runs a replay-safe one with
the same idempotency key, exactly as for a worker that died inside the tool.

A resumed turn (no batch in memory) reads its executions, and starts a call without a
committed intent in a transaction of its own first, as does a call after a background
delegation group.
"""

from __future__ import annotations

import copy
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from . import budget, failpoints, fanout
from .authorization import is_allowed
from .exceptions import BudgetExceeded, LostClaim
from .messages import ToolCallPart, ToolResultPart
from .models import Message, ToolExecution
from .repair import not_executed, unknown_result
from .skills import LOAD_SKILL, turn_tools, unknown_tool
from .states import FINISHED_TOOL_STATUSES, Phase, ToolStatus
from .tools.base import Tool, ToolContext, render_result, to_json, validation_message
from .tools.coordination import CoordinationTool

if TYPE_CHECKING:
    from . import store
    from .agents import Agent
    from .messages import ChatMessage
    from .models import Conversation, Turn


@dataclass
class _Next:
    """What a tool result's transaction also wrote: the next intent, or the batch's end."""

    state: dict[str, Any] | None = None
    root: dict[str, Any] = field(default_factory=dict)
    messages: list[Message] = field(default_factory=list)
    skipped: list[ToolCallPart] = field(default_factory=list)


class ToolPhase:
    """The tools phase of :class:`~turnkit_django.runtime.Execution` (a mixin)."""

    claim: store.Claim
    fenced: store.Fenced
    row: Turn
    conversation: Conversation
    agent: Agent
    tools: dict[str, Tool]
    state: dict[str, Any]
    visible: list[ChatMessage]
    #: The executions of the current batch when this worker recorded its response (else None:
    #: read them), and the ids of those it committed as ``running`` before starting them.
    batch: dict[str, ToolExecution] | None
    started: set[str]
    deferred_error: BudgetExceeded | None

    if TYPE_CHECKING:
        @property
        def background(self) -> bool: ...

        def emit(self, type_: str, **payload: Any) -> None: ...

        def _remember(self, message: Message) -> None: ...

    def delegates(self, call: ToolCallPart) -> bool:
        """Whether ``call`` is a background delegation (fanned out, joined: no intent here)."""
        return self.background and fanout.delegates(self, call)  # type: ignore[arg-type]

    def _response_calls(self) -> list[ToolCallPart]:
        """The tool calls of the persisted response: the turn's newest assistant message."""
        for chat in reversed(self.visible):
            if chat.role == "assistant":
                return chat.tool_calls
        return []

    def tools_step(self) -> None:
        calls = self._response_calls()
        existing = self.batch
        if existing is None:
            existing = {e.tool_call_id: e
                        for e in ToolExecution.objects.filter(turn_id=self.row.pk)}
        self.batch = None
        terminal: dict[str, Any] | None = self.state.get("terminal")
        for index, call in enumerate(calls):
            if self.state["phase"] != Phase.TOOLS:
                return  # a result's transaction moved the turn on
            execution = existing.get(call.id)
            if execution is not None and execution.status in FINISHED_TOOL_STATUSES:
                continue
            if terminal is not None:
                self._skip(call, f"the turn ended with {terminal['tool']!r}")
                continue
            if self.delegates(call):
                fanout.run_group(self, calls, call, existing)  # type: ignore[arg-type]
                continue
            rest = [c for c in calls[index + 1:] if existing.get(c.id) is None
                    or existing[c.id].status not in FINISHED_TOOL_STATUSES]
            outcome = self._run_call(call, execution, rest, existing)
            if outcome is not None:
                terminal = outcome
        if self.state["phase"] == Phase.TOOLS:  # no result's transaction ended the batch
            root: dict[str, Any] = {}
            with self.fenced.atomic() as ledger:
                state = self._leave(ledger, terminal, root)
                self.fenced.update_turn(state=state, root=root)
            self.state = state

    def _leave(self, ledger: dict[str, Any], terminal: dict[str, Any] | None,
               root: dict[str, Any]) -> dict[str, Any]:
        """The state ending the batch: ``output`` after a terminal tool, else ``model`` with the
        next iteration reserved (or its denial recorded). Call under the tree lock."""
        state = dict(self.state)
        if terminal is not None:
            state.update(terminal=terminal, phase=Phase.OUTPUT,
                         candidate={"text": terminal["text"], "data": terminal.get("data")})
        else:
            update, record = budget.reserve_next(ledger, timezone.now())
            root.update(update)
            state.update(phase=Phase.MODEL, reservation=record)
        return state

    def _skip(self, call: ToolCallPart, reason: str) -> None:
        with self.fenced.atomic():
            message = self._skip_locked(call, reason)
        self._remember(message)
        self.emit("tool_call.skipped", id=call.id, name=call.name)

    def _skip_locked(self, call: ToolCallPart, reason: str) -> Message:
        content = not_executed(reason)
        execution = self.fenced.create_execution(
            tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
            status=ToolStatus.CANCELLED, result=content, completed_at=timezone.now(),
        )
        return self.fenced.append(
            "tool", [ToolResultPart(call.id, call.name, content, is_error=True)],
            kind="tool_result", tool_execution_id=execution.pk,
        )

    def open_call(self, ledger: dict[str, Any], call: ToolCallPart, root: dict[str, Any]
                  ) -> tuple[ToolExecution, Message | None, BudgetExceeded | None]:
        """Under the tree lock: reserve a tool slot and write the call's intent (``running``).

        A slot refused by a root-wide limit gives the call its failed result at once (returned
        with the error that fails the turn). Raises BudgetExceeded, writing nothing, when the
        tree ran out of time or money. The slot's root update is added to ``root``.
        """
        now = timezone.now()
        budget.check_open(ledger, now)
        update, denied = budget.reserve_tool(ledger, call.name)
        if denied is not None:
            denial = {"error": "budget_exceeded", "message": denied}
            created = self.fenced.create_execution(
                tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
                status=ToolStatus.FAILED, error=denial, budget_denied=True, completed_at=now,
            )
            message = self.fenced.append(
                "tool", [ToolResultPart(call.id, call.name, denial, is_error=True)],
                kind="tool_result", tool_execution_id=created.pk,
            )
            return created, message, BudgetExceeded(denied, limit=budget.limit_of(denied))
        root.update(update or {})
        ledger["tree_tool_executions"] += 1  # a later reservation in this block sees it
        ledger["tree_tool_counts"] = root["tree_tool_counts"]
        execution = self.fenced.create_execution(
            tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
            status=ToolStatus.RUNNING, started_at=now, attempts=1,
        )
        self.started.add(execution.pk)
        return execution, None, None

    def _start(self, call: ToolCallPart, execution: ToolExecution | None) -> ToolExecution | None:
        """Record the intent (or restart a replay-safe one); return None if it was interrupted."""
        tool = self.tools.get(call.name)
        if execution is not None and execution.status == ToolStatus.RUNNING and not (
            tool is not None and tool.replay_safe
        ):
            # Its worker died mid-call and nobody reconciled it: the outcome is unknown.
            self._finish(execution, call, ToolStatus.INTERRUPTED, unknown_result(),
                         expected=(ToolStatus.RUNNING,), interrupted=True)
            return None
        message = error = None
        with self.fenced.atomic() as ledger:
            if execution is None:
                root: dict[str, Any] = {}
                execution, message, error = self.open_call(ledger, call, root)
                if root:
                    self.fenced.update_root(**root)
            else:
                budget.check_open(ledger, timezone.now())
                self.fenced.set_execution(
                    execution.pk, [ToolStatus.PENDING, ToolStatus.RUNNING],
                    status=ToolStatus.RUNNING, started_at=timezone.now(),
                    attempts=F("attempts") + 1,
                )
        if message is not None:
            self._remember(message)
        if error is not None:
            raise error
        return execution

    def _run_call(self, call: ToolCallPart, execution: ToolExecution | None,
                  rest: list[ToolCallPart], existing: dict[str, ToolExecution]
                  ) -> dict[str, Any] | None:
        """Run one tool call to its single result; return a terminal record if it ends the turn."""
        if execution is None or execution.pk not in self.started:
            execution = self._start(call, execution)
            if execution is None:
                return None
        self.emit("tool_call.started", id=call.id, name=call.name)
        failpoints.hit("after_tool_intent")
        tool = self.tools.get(call.name)
        self.deferred_error = None
        status, content, terminal = self._invoke(tool, call, execution)
        failpoints.hit("after_tool_call")
        self._finish(execution, call, status, content, expected=(ToolStatus.RUNNING,),
                     then=(rest, terminal, existing))
        if call.name == LOAD_SKILL and status == ToolStatus.COMPLETED:
            self.tools = turn_tools(self.agent, self.row.pk)
        failpoints.hit("after_tool_commit")
        if self.deferred_error is not None:
            raise self.deferred_error
        return terminal

    def _invoke(
        self, tool: Tool | None, call: ToolCallPart, execution: ToolExecution
    ) -> tuple[str, Any, dict[str, Any] | None]:
        if tool is None:
            return ToolStatus.FAILED, unknown_tool(self.agent, call.name, self.tools), None
        if call.raw_arguments is not None:
            return ToolStatus.FAILED, {
                "error": "invalid_arguments",
                "message": f"The arguments for {call.name!r} are not a JSON object; send a JSON "
                           "object matching the tool's schema.",
            }, None
        principal = self.row.principal
        if not is_allowed("tool", principal=principal, tool=call.name, arguments=call.arguments,
                          turn_id=self.row.pk, conversation_id=self.conversation.pk):
            return ToolStatus.FAILED, {
                "error": "not_authorized",
                "message": f"You are not allowed to call {call.name!r} for this principal.",
            }, None
        try:
            args = tool.validate(call.arguments)
        except ValidationError as exc:
            return ToolStatus.FAILED, validation_message(call.name, exc), None
        if tool.builtin == "sub_agent":
            from .subagents import run_inline_child

            return run_inline_child(self, tool, call, execution, args)  # type: ignore[arg-type]
        if isinstance(tool, CoordinationTool):
            return tool.execute(self, call, execution, args)  # type: ignore[arg-type]
        from .handles import Turn as TurnHandle

        ctx = ToolContext(
            turn=TurnHandle(self.row),
            conversation_id=self.conversation.pk,
            execution_id=execution.pk,
            tool_call_id=call.id,
            principal=copy.deepcopy(principal),
            context=copy.deepcopy((self.row.options or {}).get("context") or {}),
        )
        try:
            failpoints.hit("inside_tool")
            result = to_json(tool.call(ctx, args))
        except LostClaim:
            raise
        except Exception as exc:
            return ToolStatus.FAILED, {"error": type(exc).__name__, "message": str(exc)}, None
        terminal = None
        if tool.terminal:
            terminal = {"tool": call.name, "call_id": call.id,
                        "text": tool.completion_text(result), "data": None}
        return ToolStatus.COMPLETED, result, terminal

    def _finish(
        self,
        execution: ToolExecution,
        call: ToolCallPart,
        status: str,
        content: Any,
        *,
        expected: tuple[str, ...],
        interrupted: bool = False,
        then: tuple[list[ToolCallPart], dict[str, Any] | None,
                    dict[str, ToolExecution]] | None = None,
    ) -> None:
        """Record the result; with ``then`` (the calls left, the terminal record, the batch's
        executions) also write what follows in the same transaction (see the module doc)."""
        is_error = status != ToolStatus.COMPLETED
        fields: dict[str, Any] = {"status": status, "completed_at": timezone.now()}
        fields["error" if is_error else "result"] = content
        after = _Next()
        with self.fenced.atomic() as ledger:
            if not self.fenced.set_execution(execution.pk, expected, **fields):
                raise LostClaim(self.row.pk, self.claim.fence)
            message = self.fenced.append(
                "tool", [ToolResultPart(call.id, call.name, content, is_error=is_error)],
                kind="tool_result", tool_execution_id=execution.pk,
                metadata={"interrupted": True} if interrupted else None,
            )
            if then is not None and self.deferred_error is None:
                self._then(ledger, after, *then)
            if after.state is not None:
                self.fenced.update_turn(state=after.state, root=after.root)
            elif after.root:
                self.fenced.update_root(**after.root)
        execution.status = status
        self._remember(message)
        if interrupted:
            self.emit("tool_call.interrupted", id=call.id, name=call.name,
                      tool_execution_id=execution.pk)
        elif is_error:
            self.emit("tool_call.failed", id=call.id, name=call.name, error=content,
                      result_chars=len(render_result(content)))
        else:
            self.emit("tool_call.completed", id=call.id, name=call.name,
                      result_chars=len(render_result(content)))
        if after.state is not None:
            self.state = after.state
        for skipped, written in zip(after.skipped, after.messages, strict=False):
            self._remember(written)
            self.emit("tool_call.skipped", id=skipped.id, name=skipped.name)
        for written in after.messages[len(after.skipped):]:
            self._remember(written)

    def _then(self, ledger: dict[str, Any], after: _Next, rest: list[ToolCallPart],
              terminal: dict[str, Any] | None, existing: dict[str, ToolExecution]) -> None:
        """Inside a result's transaction: start the next call, or end the batch."""
        if any(c.id in existing for c in rest):
            return  # a resumed batch: the loop handles the calls that have executions
        if terminal is not None:
            for call in rest:
                after.messages.append(self._skip_locked(
                    call, f"the turn ended with {terminal['tool']!r}"))
                after.skipped.append(call)
            after.state = self._leave(ledger, terminal, after.root)
        elif not rest:
            after.state = self._leave(ledger, None, after.root)
        elif not self.delegates(rest[0]):
            try:
                execution, message, error = self.open_call(ledger, rest[0], after.root)
            except BudgetExceeded:
                return  # out of time or money: the loop's own start fails the turn
            existing[rest[0].id] = execution
            if message is not None:
                after.messages.append(message)
            self.deferred_error = error


__all__ = ["ToolPhase"]
