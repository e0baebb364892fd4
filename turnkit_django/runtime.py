"""The phase loop of one claimed turn: model → tools → output, every step committed.

The loop re-reads its phase from ``Turn.state`` (kept in memory between the steps it commits),
so a replacement worker continues exactly where the last committed step stopped:

* a committed model response is never requested again;
* a committed tool result is never re-run; a tool that was running when its worker died is
  ``interrupted`` ("outcome unknown"), or re-run with the same idempotency key if replay-safe;
* no transaction is open and no lock is held during a model call or a tool call.
"""

from __future__ import annotations

import copy
import logging
import threading
from typing import Any

from django.db import close_old_connections, connection
from django.db.models import F
from django.utils import timezone
from pydantic import ValidationError

from . import budget, failpoints, fanout, store
from .agents import Agent
from .authorization import is_allowed
from .clients.base import Client, ModelRequest, ModelResponse
from .compaction import auto_compact, project
from .deliveries import finished
from .events import EventCallback, emit
from .exceptions import BudgetExceeded, LostClaim, ModelError, TurnkitError
from .internal import charge
from .messages import ChatMessage, DataPart, TextPart, ToolCallPart, ToolResultPart, load_parts
from .models import Conversation, Message, ToolExecution, Turn
from .policies import review
from .prompts import compose
from .repair import repair, unknown_result
from .skills import LOAD_SKILL, turn_tools, unknown_tool
from .states import FINISHED_TOOL_STATUSES, Phase, ToolStatus, TurnStatus
from .tools.base import Tool, ToolContext, render_result, to_json, validation_message
from .tools.coordination import CoordinationTool

logger = logging.getLogger("turnkit_django.runtime")


class Suspended(Exception):
    """The turn released its claim to wait (background fan-out, wait_for)."""


def error_record(exc: BaseException, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {"type": type(exc).__name__, "message": str(exc)}
    if isinstance(exc, BudgetExceeded):
        record.update(reason=exc.reason, limit=exc.limit)
    record.update(extra)
    return record


class Heartbeat:
    """A thread that keeps the claim's heartbeat fresh; stops on LostClaim or exit."""

    def __init__(self, claim: store.Claim, interval: float) -> None:
        self.claim = claim
        self.interval = interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"turnkit-heartbeat-{claim.turn_id}",
                                        daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=max(self.interval, 1.0) * 2)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                try:
                    store.heartbeat(self.claim)
                except LostClaim:
                    return
                except Exception:
                    logger.exception("heartbeat failed for turn %r", self.claim.turn_id)
                    close_old_connections()
        finally:
            connection.close()


class Execution:
    """Runs one claimed turn until it finishes, suspends, or loses its claim."""

    def __init__(
        self,
        claim: store.Claim,
        row: Turn,
        agent: Agent,
        *,
        client: Client | None = None,
        on_event: EventCallback | None = None,
    ) -> None:
        self.claim = claim
        self.fenced = store.Fenced(claim)
        self.row = row
        self.conversation: Conversation = row.conversation
        self.agent = agent
        self.client = client or agent.resolved_client()
        self.on_event = on_event or agent.on_event
        self.state: dict[str, Any] = copy.deepcopy(row.state or {})
        self.state.setdefault("phase", Phase.MODEL)
        # Tools of loaded skills are derived from persisted executions, so a resumed turn agrees.
        self.tools: dict[str, Tool] = turn_tools(agent, row.pk)
        self.visible = self._load_visible()

    # -- plumbing ----------------------------------------------------------------

    @property
    def background(self) -> bool:
        return self.row.submitted_at is not None

    def emit(self, type_: str, **payload: Any) -> None:
        emit(type_, turn_id=self.row.pk, conversation_id=self.conversation.pk,
             callback=self.on_event, **payload)

    def _load_visible(self) -> list[ChatMessage]:
        rows = Message.objects.filter(conversation_id=self.conversation.pk).filter(
            sequence__lte=self.row.context_sequence
        ) | Message.objects.filter(turn_id=self.row.pk)
        return [self._chat(m) for m in rows.order_by("sequence")]

    @staticmethod
    def _chat(message: Message) -> ChatMessage:
        return ChatMessage(message.role, tuple(load_parts(message.content)),  # type: ignore[arg-type]
                           message.kind, message.sequence, message.metadata or {})

    def _remember(self, message: Message) -> None:
        self.visible.append(self._chat(message))
        self.emit("message.created", message_id=message.pk, role=message.role, kind=message.kind)

    # -- loop --------------------------------------------------------------------------

    def run(self) -> None:
        try:
            while True:
                phase = self.state["phase"]
                if phase == Phase.MODEL:
                    self.model_step()
                elif phase == Phase.TOOLS:
                    self.tools_step()
                elif phase == Phase.OUTPUT:
                    self.output_step()
                    if self.state["phase"] != Phase.MODEL:  # not sent back for a revision
                        return
                else:
                    return
        except (LostClaim, Suspended):
            return
        except (BudgetExceeded, ModelError, TurnkitError) as exc:
            self.fail(error_record(exc))
        except Exception as exc:
            if self.background:
                # Recover rather than guess: reconciliation resumes the persisted phase.
                raise
            logger.exception("inline turn %r failed", self.row.pk)
            self.fail(error_record(exc))

    # -- model phase --------------------------------------------------------------------

    def build_request(self) -> ModelRequest:
        instructions = compose(self.agent, self.row, self.conversation)
        options = self.row.options or {}
        return ModelRequest(
            model=self.row.model,
            messages=tuple(project(self.visible)),
            tools=tuple(t.spec() for t in self.tools.values()),
            stable_instructions=instructions.stable,
            dynamic_instructions=instructions.dynamic,
            output_schema=options.get("output_schema"),
            thinking=options.get("thinking") or None,
            metadata={"turn_id": self.row.pk, "conversation_id": self.conversation.pk,
                      "agent": self.agent.name, "prompt": instructions.report()},
        )

    def model_step(self) -> None:
        with self.fenced.atomic() as ledger:
            budget.check_open(ledger, timezone.now())
            self.fenced.update_root(**budget.reserve_iteration(ledger))
        request = auto_compact(self, self.build_request())
        self.emit("model.requested", model=request.model, tool_names=request.tool_names,
                  message_count=len(request.messages))
        failpoints.hit("before_model_call")
        response = self.client.complete(request)
        self.record_response(response)
        failpoints.hit("after_model_commit")

    def record_response(self, response: ModelResponse) -> None:
        state = dict(self.state)
        state["iterations"] = state.get("iterations", 0) + 1
        state["phase"] = Phase.TOOLS if response.tool_calls else Phase.OUTPUT
        state["candidate"] = {"text": response.text, "data": response.output_data}
        kind = "tool_call" if response.tool_calls else "text"
        with self.fenced.atomic():
            turn_fields, cost = charge(self, response, self.row.model)
            message = self.fenced.append(
                "assistant", response.parts, kind=kind,
                metadata={"model": response.model or self.row.model,
                          "usage": response.usage.as_dict(),
                          "cost": None if cost is None else str(cost),
                          "stop_reason": response.stop_reason,
                          "provider": response.provider},
            )
            state["response_message_id"] = message.pk
            self.fenced.update_turn(state=state, **turn_fields)
        self.state = state
        self._remember(message)
        self.emit("model.completed", model=response.model or self.row.model,
                  tool_call_count=len(response.tool_calls), usage=response.usage.as_dict(),
                  cost=None if cost is None else str(cost))

    # -- tools phase --------------------------------------------------------------------

    def _response_calls(self) -> list[ToolCallPart]:
        """The tool calls of the persisted response: the turn's newest assistant message."""
        for chat in reversed(self.visible):
            if chat.role == "assistant":
                return chat.tool_calls
        return []

    def tools_step(self) -> None:
        calls = self._response_calls()
        existing = {e.tool_call_id: e for e in ToolExecution.objects.filter(turn_id=self.row.pk)}
        terminal: dict[str, Any] | None = self.state.get("terminal")
        for call in calls:
            execution = existing.get(call.id)
            if execution is not None and execution.status in FINISHED_TOOL_STATUSES:
                continue
            if terminal is not None:
                self._skip(call, f"the turn ended with {terminal['tool']!r}")
                continue
            if self.background and fanout.delegates(self, call):
                fanout.run_group(self, calls, call, existing)  # joins, or raises Suspended
                continue
            outcome = self._run_call(call, execution)
            if outcome is not None:
                terminal = outcome
        state = dict(self.state)
        if terminal is not None:
            state["terminal"] = terminal
            state["phase"] = Phase.OUTPUT
            state["candidate"] = {"text": terminal["text"], "data": terminal.get("data")}
        else:
            state["phase"] = Phase.MODEL
        with self.fenced.atomic():
            self.fenced.update_turn(state=state)
        self.state = state

    def _skip(self, call: ToolCallPart, reason: str) -> None:
        from .repair import not_executed

        content = not_executed(reason)
        with self.fenced.atomic():
            execution = self.fenced.create_execution(
                tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
                status=ToolStatus.CANCELLED, result=content, completed_at=timezone.now(),
            )
            message = self.fenced.append(
                "tool", [ToolResultPart(call.id, call.name, content, is_error=True)],
                kind="tool_result", tool_execution_id=execution.pk,
            )
        self._remember(message)
        self.emit("tool_call.skipped", id=call.id, name=call.name)

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
        now = timezone.now()
        with self.fenced.atomic() as ledger:
            budget.check_open(ledger, now)
            if execution is None:
                update, denied = budget.reserve_tool(ledger, call.name)
                if denied is not None:
                    denial = {"error": "budget_exceeded", "message": denied}
                    created = self.fenced.create_execution(
                        tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
                        status=ToolStatus.FAILED, error=denial, budget_denied=True,
                        completed_at=now,
                    )
                    message = self.fenced.append(
                        "tool", [ToolResultPart(call.id, call.name, denial, is_error=True)],
                        kind="tool_result", tool_execution_id=created.pk,
                    )
                    self._remember(message)
                    raise_after = BudgetExceeded(denied, limit=budget.limit_of(denied))
                else:
                    self.fenced.update_root(**(update or {}))
                    execution = self.fenced.create_execution(
                        tool_call_id=call.id, tool_name=call.name, arguments=call.arguments,
                        status=ToolStatus.RUNNING, started_at=now, attempts=1,
                    )
                    raise_after = None
            else:
                self.fenced.set_execution(
                    execution.pk, [ToolStatus.PENDING, ToolStatus.RUNNING],
                    status=ToolStatus.RUNNING, started_at=now, attempts=F("attempts") + 1,
                )
                raise_after = None
        if raise_after is not None:
            raise raise_after
        self.emit("tool_call.started", id=call.id, name=call.name)
        failpoints.hit("after_tool_intent")
        return execution

    def _run_call(
        self, call: ToolCallPart, execution: ToolExecution | None
    ) -> dict[str, Any] | None:
        """Run one tool call to its single result; return a terminal record if it ends the turn."""
        started = self._start(call, execution)
        if started is None:
            return None
        tool = self.tools.get(call.name)
        self.deferred_error: BudgetExceeded | None = None
        status, content, terminal = self._invoke(tool, call, started)
        failpoints.hit("after_tool_call")
        self._finish(started, call, status, content, expected=(ToolStatus.RUNNING,))
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

            return run_inline_child(self, tool, call, execution, args)
        if isinstance(tool, CoordinationTool):
            return tool.execute(self, call, execution, args)
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
    ) -> None:
        is_error = status != ToolStatus.COMPLETED
        fields: dict[str, Any] = {"status": status, "completed_at": timezone.now()}
        fields["error" if is_error else "result"] = content
        with self.fenced.atomic():
            if not self.fenced.set_execution(execution.pk, expected, **fields):
                raise LostClaim(self.row.pk, self.claim.fence)
            message = self.fenced.append(
                "tool", [ToolResultPart(call.id, call.name, content, is_error=is_error)],
                kind="tool_result", tool_execution_id=execution.pk,
                metadata={"interrupted": True} if interrupted else None,
            )
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

    # -- output phase ------------------------------------------------------------------

    def output_step(self) -> None:
        candidate = self.state.get("candidate") or {}
        text = candidate.get("text") or ""
        data = candidate.get("data")
        outcome = review(self, text, data)
        if outcome.revised:
            return
        failpoints.hit("before_publish")
        if outcome.error is not None:
            self.fail(outcome.error, **outcome.fields)
        else:
            self.publish(text, data, **outcome.fields)

    def publish(self, text: str, data: Any, **fields: Any) -> None:
        state = dict(self.state, phase=Phase.DONE)
        with self.fenced.atomic():
            self.fenced.update_turn(
                status=TurnStatus.COMPLETED, output_text=text, output_data=data, state=state,
                completed_at=timezone.now(), fence=F("fence") + 1, claimed_by="", **fields,
            )
            finished(self.row.pk)  # callback and wake commit with the terminal write
        self.state = state
        self.emit("turn.completed", status=TurnStatus.COMPLETED, output_text=text)

    def fail(self, error: dict[str, Any], **fields: Any) -> None:
        """Finish the turn as failed, closing every open tool call first."""
        state = dict(self.state, phase=Phase.DONE)
        try:
            with self.fenced.atomic():
                repair(self.row, reason="the turn failed", fence=self.claim.fence)
                self.fenced.update_turn(
                    status=TurnStatus.FAILED, error=error, state=state,
                    completed_at=timezone.now(), fence=F("fence") + 1, claimed_by="", **fields,
                )
                finished(self.row.pk)
        except LostClaim:
            return
        self.state = state
        self.emit("turn.failed", error=error)


def text_response(response: ModelResponse) -> str:
    return "".join(p.text for p in response.parts if isinstance(p, TextPart))


def data_response(response: ModelResponse) -> Any:
    for part in response.parts:
        if isinstance(part, DataPart):
            return part.data
    return None


def execute(
    turn_id: str,
    *,
    agent: Agent | None = None,
    kind: str = "inline",
    client: Client | None = None,
    on_event: EventCallback | None = None,
) -> bool:
    """Claim ``turn_id`` and run it; return False if it was not claimable."""
    from .conf import turnkit_settings
    from .registry import get_agent

    claim_ = store.claim(turn_id, store.worker_identity(kind))
    if claim_ is None:
        return False
    row = Turn.objects.select_related("conversation").get(pk=turn_id)
    resolved = agent if agent is not None and agent.name == row.agent_name else get_agent(
        row.agent_name)
    client = client or fanout.inherited_client(row, resolved)  # a worker rebuilding a child
    execution = Execution(claim_, row, resolved, client=client, on_event=on_event)
    execution.emit("turn.started", status=TurnStatus.RUNNING, model=row.model)
    with Heartbeat(claim_, float(turnkit_settings.HEARTBEAT_INTERVAL)):
        execution.run()
    return True
