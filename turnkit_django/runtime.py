"""The phase loop of one claimed turn: model → tools → output, every step committed.

The loop re-reads its phase from ``Turn.state`` (kept in memory between the steps it commits),
so a replacement worker continues exactly where the last committed step stopped:

* a committed model response is never requested again;
* a committed tool result is never re-run; a tool that was running when its worker died is
  ``interrupted`` ("outcome unknown"), or re-run with the same idempotency key if replay-safe;
* no transaction is open and no lock is held during a model call or a tool call.

One commit per step. The transaction that moves a turn to the model phase (the claim, the end
of a tool batch, a revision request) also checks the tree's time and money and reserves the next
iteration, recording the reservation (or its denial, which fails the turn at the model step with
the same BudgetExceeded) in ``Turn.state["reservation"]``, so the model step itself takes no lock
before calling the model, and a resumed turn never reserves twice. The response's transaction
also writes the first tool call's intent (:mod:`turnkit_django.tool_phase`), or publishes the
turn when it asked for no tools and the output review has nothing to run.
"""

from __future__ import annotations

import copy
import logging
import threading
from decimal import Decimal
from typing import Any

from django.db import close_old_connections, connection
from django.db.models import F
from django.utils import timezone

from . import budget, failpoints, fanout, store
from .agents import Agent
from .clients.base import Client, ModelRequest, ModelResponse
from .compaction import auto_compact, project
from .deliveries import finished
from .events import EventCallback, emit
from .exceptions import BudgetExceeded, LostClaim, ModelError, TurnkitError
from .internal import charge
from .messages import ChatMessage, load_parts
from .models import Conversation, Message, ToolExecution, Turn
from .policies import review
from .prompts import compose
from .repair import repair
from .skills import turn_tools
from .states import Phase, TurnStatus
from .tool_phase import ToolPhase
from .tools.base import Tool

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


class Execution(ToolPhase):
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
        self.batch: dict[str, ToolExecution] | None = None
        self.started: set[str] = set()
        self.deferred_error: BudgetExceeded | None = None

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
        self._reserved()
        request = self.build_request()
        compacted = auto_compact(self, request)
        if compacted is not request:  # a summary was paid for: check time and money again
            with self.fenced.atomic() as ledger:
                budget.check_open(ledger, timezone.now())
        self.emit("model.requested", model=compacted.model, tool_names=compacted.tool_names,
                  message_count=len(compacted.messages))
        failpoints.hit("before_model_call")
        response = self.client.complete(compacted)
        error = self.record_response(response)
        failpoints.hit("after_model_commit")
        if error is not None:
            raise error

    def _reserved(self) -> None:
        """Raise a stored reservation denial; reserve now if the turn came without one."""
        record = self.state.get("reservation")
        if record is None:
            with self.fenced.atomic() as ledger:
                update, record = budget.reserve_next(ledger, timezone.now())
                state = dict(self.state, reservation=record)
                self.fenced.update_turn(state=state, root=update)
            self.state = state
        budget.refuse(record)

    def record_response(self, response: ModelResponse) -> BudgetExceeded | None:
        """Commit the response with what follows it; return the error that fails the turn."""
        state = dict(self.state)
        state.pop("reservation", None)  # used by this response
        state["iterations"] = state.get("iterations", 0) + 1
        state["candidate"] = {"text": response.text, "data": response.output_data}
        calls = response.tool_calls
        publish = not calls and not self.agent.output_policies  # nothing to review
        state["phase"] = Phase.TOOLS if calls else Phase.DONE if publish else Phase.OUTPUT
        first = calls[0] if calls and not self.delegates(calls[0]) else None
        opened: tuple[ToolExecution, Message | None, BudgetExceeded | None] | None = None
        if publish:
            failpoints.hit("before_publish")
        with self.fenced.atomic() as ledger:
            turn_fields, cost = charge(self, response, self.row.model)
            if cost:  # what the tree has spent now, for the first call's check
                ledger["tree_spend"] = Decimal(ledger["tree_spend"]) + cost
            message = self.fenced.append(
                "assistant", response.parts, kind="tool_call" if calls else "text",
                metadata={"model": response.model or self.row.model,
                          "usage": response.usage.as_dict(),
                          "cost": None if cost is None else str(cost),
                          "stop_reason": response.stop_reason,
                          "provider": response.provider},
            )
            state["response_message_id"] = message.pk
            root: dict[str, Any] = {}
            if first is not None:
                try:
                    opened = self.open_call(ledger, first, root)
                except BudgetExceeded:
                    pass  # out of time or money: the tools phase fails the turn
            if publish:
                turn_fields.update(self._completion(response.text, response.output_data))
            self.fenced.update_turn(state=state, root=root, **turn_fields)
            if publish and self.background:
                finished(self.row.pk)  # callback and wake commit with the terminal write
        self.state = state
        self._remember(message)
        self.batch = {} if calls else None  # its calls have no other executions
        error = None
        if opened is not None:
            execution, denial, error = opened
            self.batch = {execution.tool_call_id: execution}
            if denial is not None:
                self._remember(denial)
        self.emit("model.completed", model=response.model or self.row.model,
                  tool_call_count=len(calls), usage=response.usage.as_dict(),
                  cost=None if cost is None else str(cost))
        if publish:
            self.emit("turn.completed", status=TurnStatus.COMPLETED, output_text=response.text)
        return error

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

    @staticmethod
    def _completion(text: str, data: Any) -> dict[str, Any]:
        """The fields of the terminal write publishing ``text`` and ``data``."""
        return {"status": TurnStatus.COMPLETED, "output_text": text, "output_data": data,
                "completed_at": timezone.now(), "fence": F("fence") + 1, "claimed_by": ""}

    def publish(self, text: str, data: Any, **fields: Any) -> None:
        state = dict(self.state, phase=Phase.DONE)
        with self.fenced.atomic():
            self.fenced.update_turn(state=state, **{**self._completion(text, data), **fields})
            if self.background:
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
                if self.background:
                    finished(self.row.pk)
        except LostClaim:
            return
        self.state = state
        self.emit("turn.failed", error=error)


def on_claim(turn: Turn, ledger: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    """Written with the claim: a turn in the model phase gets its iteration reserved (once;
    a reservation it already holds is only checked again against time and money)."""
    state = dict(turn.state or {})
    if state.setdefault("phase", Phase.MODEL) != Phase.MODEL:
        return {}, {}
    record, root = state.get("reservation"), dict[str, Any]()
    if record is None:
        root, record = budget.reserve_next(ledger, timezone.now())
    else:
        record = budget.recheck(record, ledger, timezone.now())
    state["reservation"] = record
    return {"state": state}, root


def execute(
    turn_id: str,
    *,
    agent: Agent | None = None,
    kind: str = "inline",
    client: Client | None = None,
    on_event: EventCallback | None = None,
    root_id: str | None = None,
) -> bool:
    """Claim ``turn_id`` and run it; return False if it was not claimable.

    ``root_id``, when the caller knows the turn's root, saves one lookup before the claim.
    """
    from .conf import turnkit_settings
    from .registry import get_agent

    claimed = store.claim_turn(turn_id, store.worker_identity(kind), root_id=root_id,
                               prepare=on_claim)
    if claimed is None:
        return False
    claim_, row = claimed
    resolved = agent if agent is not None and agent.name == row.agent_name else get_agent(
        row.agent_name)
    client = client or fanout.inherited_client(row, resolved)  # a worker rebuilding a child
    execution = Execution(claim_, row, resolved, client=client, on_event=on_event)
    execution.emit("turn.started", status=TurnStatus.RUNNING, model=row.model)
    with Heartbeat(claim_, float(turnkit_settings.HEARTBEAT_INTERVAL)):
        execution.run()
    return True
