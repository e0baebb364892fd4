"""The phase loop of one claimed turn: model → tools → output, every step committed.

The loop re-reads its phase from the turn's state (kept in memory between the steps it commits),
so a replacement worker continues exactly where the last committed step stopped:

* a committed model response is never requested again;
* a committed tool result is never re-run; a tool that was running when its worker died is
  ``interrupted`` ("outcome unknown"), or re-run with the same idempotency key if replay-safe;
* no transaction is open and no lock is held during a model call or a tool call.

One commit per step: see :mod:`.model` (a response commits with what follows it) and
:mod:`.results` (a tool result commits with the next call's intent or the batch's end).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..agents import AgentDefinition, get_agent
from ..base import shutdown
from ..base.error_records import ErrorRecord
from ..base.serialization import JsonObject
from ..base.states import Phase, TurnStatus
from ..clients import Client, ModelRequest, ModelResponse
from ..conf import turnkit_settings
from ..conf.deltas import DeltaCallback
from ..events import EventCallback
from ..exceptions import AtomicBlockError, BudgetExceeded, LostClaim, ModelError, TurnkitError
from ..messages import Part
from ..observability import tracing
from ..store import (
    Claim,
    Fenced,
    History,
    Ledger,
    LedgerDelta,
    TurnState,
    adopt,
    claim_turn,
    history_before,
    reload,
    remember_history,
    to_chat,
    visible_history,
    worker_identity,
)
from ..store.commits import in_application_atomic_block
from ..store.input_checks import delta_callback
from ..store.reads import loaded_last_sequence, running_among, turn_with_conversation
from . import budget, controls, sources
from .calls import turn_tools
from .context import ControlPending, HandBack, Suspended, TurnContext
from .creation import new_claimed_turn
from .delegation import inherited_client
from .heartbeat import Heartbeat
from .model import build_request, model_step
from .output import fail, output_step
from .streaming import delta_sink
from .submission import dispatch
from .tools import tools_step

if TYPE_CHECKING:
    from ..models import Turn

logger = logging.getLogger("turnkit_django.runtime")

STEPS = {Phase.MODEL: model_step, Phase.TOOLS: tools_step, Phase.OUTPUT: output_step}


def run(ctx: TurnContext) -> None:
    """Run the claimed turn until it finishes, suspends, or loses its claim."""
    try:
        sources.offer(ctx)  # once per turn: a resumed turn has its tools recorded
        while ctx.state.phase in STEPS:
            ctx.check_stop()
            if ctx.fenced.controls_pending:  # a step boundary: pause, steering
                controls.boundary(ctx)
                continue
            phase = ctx.state.phase
            counted = phase != Phase.OUTPUT
            ctx.steps += counted
            try:
                STEPS[phase](ctx)
            except ControlPending:
                ctx.steps -= counted  # run again after the boundary
                continue
            if phase == Phase.OUTPUT and ctx.state.phase != Phase.MODEL:
                return  # published or failed (not sent back for a revision)
    except (LostClaim, Suspended):
        return
    except HandBack:
        hand_back(ctx)
    except (BudgetExceeded, ModelError, TurnkitError) as exc:
        fail(ctx, ErrorRecord.of(exc))
    except Exception as exc:
        if ctx.background:
            # Recover rather than guess: reconciliation resumes the persisted phase.
            raise
        logger.exception("inline turn %r failed", ctx.row.pk)
        fail(ctx, ErrorRecord.of(exc))


def hand_back(ctx: TurnContext) -> None:
    """Give the turn back for another worker to resume now (its worker shuts down)."""
    try:
        with ctx.fenced.atomic():
            ctx.fenced.hand_back(running_among(ctx.row.pk, ctx.started))
            dispatch(ctx.row.pk)
    except LostClaim:
        return
    ctx.emit("turn.handed_back", phase=str(ctx.state.phase))


def on_claim(turn: Turn, ledger: Ledger) -> tuple[TurnState | None, LedgerDelta]:
    """Written with the claim: a turn in the model phase gets its iteration reserved (once;
    a reservation it already holds is only checked again against time and money)."""
    state = TurnState.from_json(turn.state)
    if state.phase != Phase.MODEL:
        return None, LedgerDelta()
    if state.reservation is None:
        delta, reservation = budget.reserve_next(ledger, budget.own_budget(turn.options, state))
    else:
        delta, reservation = LedgerDelta(), budget.recheck(state.reservation,
                                                           ledger)
    return state.replace(reservation=reservation), delta


def context(claim: Claim, row: Turn, agent: AgentDefinition, *, client: Client,
            on_event: EventCallback | None = None, ledger: Ledger | None = None,
            history: History | None = None) -> TurnContext:
    """The context of a claimed turn, with the transcript it sees and the tools it may call
    (``ledger``: the tree's ledger as the claim left it; ``history``: the transcript, when the
    caller has it)."""
    # A claim read the row with its conversation's: its last message is known from there.
    known = loaded_last_sequence(row)
    fenced = Fenced(claim, ledger, last_sequence=known)
    fenced.controls_pending = row.controls_pending  # a control recorded before the claim
    return TurnContext(
        claim=claim, row=row, fenced=fenced, agent=agent, client=client,
        state=TurnState.from_json(row.state),
        # Tools of loaded skills are derived from persisted executions, so a resumed turn agrees.
        tools=turn_tools(agent, row.pk, TurnState.from_json(row.state).listed_tools),
        history=history if history is not None else visible_history(row),
        on_event=on_event if on_event is not None else agent.on_event,
        child_runner=_run_child,
    )


def refuse_atomic_block(operation: str, instead: str = AtomicBlockError.SUBMIT, *,
                        reason: str = AtomicBlockError.EXECUTES) -> None:
    """Raise AtomicBlockError when called inside ``transaction.atomic()`` (``reason``: why it
    cannot run there; ``instead``: the advice after "call it outside the block").

    The block a test case wraps each test in does not count (Django's durable blocks make the
    same exception), so tests can run turns inline.
    """
    if in_application_atomic_block():
        raise AtomicBlockError(operation, instead, reason=reason)


@dataclass(frozen=True)
class Executed:
    """What :func:`execute` did: whether it claimed and ran the turn (its truth value) and,
    when the turn ended, whether other turns wait for it, as the lane's hand-off read it
    (None: not read).

    Once it ran: how this execution ended its claim (``ended_by``, the transition:
    ``publish``, ``fail``, ``suspend``, ``hand_back``, ``pause_at_boundary``,
    ``await_approval``, ``await_child``; None when it lost the claim to someone else), the
    model and tools steps it ran, and the turn's agent and conversation."""

    ran: bool
    waited_for: bool | None = None
    ended_by: str | None = None
    steps: int = 0
    agent: str = ""
    conversation_id: str = ""

    def __bool__(self) -> bool:
        return self.ran


def execute(
    turn_id: str,
    *,
    agent: AgentDefinition | None = None,
    kind: str = "inline",
    client: Client | None = None,
    on_event: EventCallback | None = None,
    root_id: str | None = None,
) -> Executed:
    """Claim ``turn_id`` and run it; false if it was not claimable.

    ``root_id``, when the caller knows the turn's root, saves one lookup before the claim.
    """
    refuse_atomic_block("executing a turn")
    claimed = claim_turn(turn_id, worker_identity(kind), root_id=root_id, prepare=on_claim)
    if claimed is None:
        return Executed(False)
    claim, row, ledger = claimed
    ctx = _run_claimed(claim, row, ledger, agent, client, on_event, visible_history(row))
    return Executed(True, ctx.waited_for, ctx.fenced.ended_by, ctx.steps, row.agent_name,
                    row.conversation_id)


def execute_new(agent: AgentDefinition, parts: Sequence[Part], *, kind: str = "inline",
                client: Client | None = None, on_event: EventCallback | None = None,
                message_metadata: JsonObject | None = None, message_key: str | None = None,
                on_delta: DeltaCallback | None = None, **options: Any) -> Turn:
    """Create a root turn claimed by this process, with ``parts`` as its input, run it, and
    return its row as the run left it.

    An inline run (``agent.run()``, ``conversation.ask()``): the turn is created with its claim
    in one write, and in a new conversation its input is all it sees, so nothing is read back
    before the first model call. ``options`` as for :func:`.creation.turn_spec`; ``on_delta``
    gets the chunks of the turn's model calls as they stream (:mod:`.streaming`).
    """
    refuse_atomic_block("executing a turn")
    delta_callback(on_delta)
    claim, row, ledger, message = new_claimed_turn(
        agent, parts, worker_identity(kind), prepare=on_claim,
        message_metadata=message_metadata, message_key=message_key, **options)
    # The turn sees the conversation up to its input. When the input is the conversation's
    # first message, or this process holds every message before it (the previous turn ran
    # here), nothing is read back before the first model call.
    before = history_before(row.conversation_id, message.sequence) if message else None
    if message is not None and (message.sequence == 1 or before is not None):
        history = History.of([*(before.messages if before else ()), to_chat(message)], before)
    else:
        history = visible_history(row)
    ended = _run_claimed(claim, row, ledger, agent, client, on_event, history,
                         keep_row=True, on_delta=on_delta).fenced.ended
    # The row as the run left it: as its terminal statement returned it, or read again.
    return reload(row) if ended is None else adopt(row, ended)


def _run_claimed(claim: Claim, row: Turn, ledger: Ledger, agent: AgentDefinition | None,
                 client: Client | None, on_event: EventCallback | None,
                 history: History, *, keep_row: bool = False,
                 on_delta: DeltaCallback | None = None) -> TurnContext:
    """Run a claimed turn; return its context (``keep_row``: its terminal write returns the
    turn's row, ``fenced.ended``)."""
    resolved = agent if agent is not None and agent.name == row.agent_name else get_agent(
        row.agent_name)
    # A worker rebuilding a sub-agent's turn finds the client of its parent's agent.
    chosen = client or inherited_client(row, resolved) or resolved.resolved_client()
    ctx = context(claim, row, resolved, client=chosen, on_event=on_event, ledger=ledger,
                  history=history)
    ctx.fenced.keep_row = keep_row
    ctx.deltas = delta_sink(on_delta, row.pk, claim.fence, row.root_turn_id)
    span = tracing.turn_span(row.pk, resolved.name, (row.options or {}).get("trace"),
                             model=row.model, conversation_id=row.conversation_id)
    try:
        with span as traced, shutdown.executing(), Heartbeat(
                claim, float(turnkit_settings.HEARTBEAT_INTERVAL), ctx.overdue):
            ctx.emit("turn.started", status=TurnStatus.RUNNING, model=row.model)
            run(ctx)
            traced.ended(ctx.fenced.ended_by)
    finally:
        # Every message of the history is committed; kept if it is the whole history.
        remember_history(row.conversation_id, ctx.history)
    return ctx


def _run_child(child: Turn, agent: AgentDefinition, client: Client,
               on_event: EventCallback | None) -> None:
    execute(child.pk, agent=agent, client=client, on_event=on_event, root_id=child.root_turn_id)


class _NoClient:
    provider = "none"

    def __init__(self, agent: AgentDefinition, row: Turn) -> None:
        # The request has the form the turn's own client gets (dynamic context snapshots).
        real = inherited_client(row, agent) or agent.resolved_client()
        self.dynamic_context_in_history = getattr(real, "dynamic_context_in_history", False)

    def complete(self, request: ModelRequest) -> ModelResponse:  # pragma: no cover
        raise AssertionError("preview never calls the model")


def preview(turn_id: str, agent: AgentDefinition) -> ModelRequest:
    """The exact next model request of a turn, built without calling the model or writing."""
    row = turn_with_conversation(turn_id)
    claim = Claim(row.pk, row.root_turn_id, row.conversation_id, row.fence, "preview")
    return build_request(context(claim, row, agent, client=_NoClient(agent, row)))


__all__ = ["Executed", "context", "execute", "execute_new", "on_claim", "preview",
           "refuse_atomic_block", "run"]
