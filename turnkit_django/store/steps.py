"""One fenced step as one statement: the fast path of :meth:`Fenced.step` on PostgreSQL.

A step's writes (the turn's state and status, the root's ledger, messages with their sequences,
tool executions created or moved) are buffered in :class:`StepWrites` while the runtime decides
the step against the ledger the worker last saw, then sent as one data-modifying statement:

* the turn's ``UPDATE`` comes first and carries the guard: the claim's fence, ``running``, and
  (on the root's row) the ledger exactly as the step assumed it. PostgreSQL re-checks that
  ``WHERE`` on the newest row version after waiting for any lock on it, so a cancel, a
  reconcile or a sibling's reservation committed meanwhile makes it match nothing;
* every other write reads the turn's ``RETURNING`` row, so nothing is written when it matched
  nothing; the conversation's ``UPDATE ... RETURNING last_sequence`` numbers the messages;
* the statement ends with ``turnkit_step_guard()`` (migration 0007), which raises when a guard or
  a compare-and-set did not hold: the whole statement rolls back and the caller decides the step
  again under the tree lock.

Lock order stays tree, then conversation. Sent in autocommit, the statement is the step's only
round trip and its only commit. The guard on the root's ledger, shared with a child's claim, is
:mod:`.guard`; a turn's other one-statement writes (creation, transitions, submit, claim) are
:mod:`.turn_statements`, re-exported here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import Subquery
from django.db.models.functions import Now

from ..base.states import TRANSITIONS, TurnStatus
from ..models import Conversation, Event, Message, ToolExecution, Turn
from . import leases, sql
from .compiled import CompiledRead
from .guard import GUARD_FAILED, ledger_guard, root_first, send_guarded
from .locks import Ledger, LedgerDelta
from .sql import Unsupported
from .turn_columns import TurnFields
from .turn_statements import claim_write, insert_claimed, submit_write, transition_write


@dataclass(frozen=True)
class Move:
    """A compare-and-set of a tool execution's status (see :meth:`Fenced.move_execution`)."""

    execution_id: str
    expected: tuple[str, ...]
    fields: dict[str, object]


@dataclass
class StepWrites:
    """The writes of one step, in the order they were made."""

    turn: TurnFields = field(default_factory=lambda: TurnFields())
    transition: str | None = None
    delta: LedgerDelta = field(default_factory=LedgerDelta)
    messages: list[Message] = field(default_factory=list)
    created: list[ToolExecution] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    #: Durable events of the step (see :mod:`.events`).
    events: list[Event] = field(default_factory=list)
    #: Whether the conversation's ``updated_at`` moves (a turn's terminal write).
    touch: bool = False
    #: A background turn's terminal write sent without its lane's hand-off: the conversation's
    #: ``last_sequence`` as this worker's last step left it (see :func:`statement`).
    lane: int | None = None
    #: The turn's columns its statement returns (a terminal write), and what it returned.
    returning: str | None = None
    returned: tuple[Any, ...] | None = None


# --------------------------------------------------------------------------- SQL pieces


def _lane_guard(lane: int | None, params: list[object]) -> str:
    """The conversation's ``UPDATE`` of a terminal write sent without its lane's hand-off
    holds only on the row this worker's last step left (``lane``, its ``last_sequence``).

    A delivery to a busy conversation appends a message, so it moves ``last_sequence``. One
    appended before that step is seen by the statement's ``NOT EXISTS`` on buffered
    deliveries; one appended since is seen here, even when it commits between the statement's
    snapshot and its lock on the row, because PostgreSQL re-checks the ``WHERE`` on the row's
    newest version; one committed after the statement finds the turn finished and wakes the
    conversation itself. Either of the first two makes the statement write nothing, and the
    hand-off is decided under the lock."""
    if lane is None:
        return ""
    params.append(lane)
    return " AND last_sequence = %s"


#: Deliveries past a turn's input in its conversation (buffered for the next turn).
_BUFFERED = CompiledRead(lambda conversation_id, turn_id: Message.objects.deliveries_after(
    conversation_id, Subquery(Turn.objects.filter(pk=turn_id).values("context_sequence")[:1]),
).values_list("pk"), 2)


def statement(turn_id: str, root_id: str, conversation_id: str, fence: int,
              known: Ledger | None, writes: StepWrites) -> tuple[str, list[object]]:
    """The step as one statement; its one row is the conversation's new ``last_sequence``.

    ``known`` None: the caller holds the tree lock, so the ledger needs no guard."""
    db = sql.db()
    params: list[object] = []
    ctes: list[str] = []
    turn_table = sql.table(Turn)
    own = dict(writes.turn)
    if writes.transition is not None:
        transition = TRANSITIONS[writes.transition]
        if TurnStatus.RUNNING not in transition.sources:
            raise Unsupported(f"transition {writes.transition!r} does not leave running")
        own["status"] = transition.target
        own["updated_at"] = Now()
    ledger = writes.delta.fields()
    guard_source = ""
    if turn_id == root_id:
        own.update(ledger)
    elif ledger or known is not None:  # the root's row: its ledger changes, or is checked
        ctes.append(root_first(root_id, ledger, known, params, db))
        guard_source = " AND EXISTS (SELECT FROM r)"
    if not own:
        own["fence"] = fence  # a no-op assignment: the guard still locks and checks the row
    assignments = sql.assign(Turn, own, params, db)
    params += [turn_id, fence, TurnStatus.RUNNING]
    # A pending control (pause, steer) refuses the fast path: the worker sees it under the lock.
    where = "id = %s AND fence = %s AND status = %s AND NOT controls_pending"
    if turn_id == root_id and known is not None:
        where += " AND " + ledger_guard(known, params, db)
    ctes.append(f"t AS (UPDATE {turn_table} SET {assignments} WHERE {where}{guard_source} "
                f"RETURNING {writes.returning or 1})")
    checks = ["(SELECT count(*) FROM t) = 1"]
    if leases.ends(writes.transition):
        ctes.append(leases.drop_cte("d", turn_id, "t", params))
    count = len(writes.messages)
    if count or writes.touch:
        touch = ", updated_at = statement_timestamp()" if writes.touch else ""
        params += [count, conversation_id]
        guard = _lane_guard(writes.lane, params)
        ctes.append(f"s AS (UPDATE {sql.table(Conversation)} SET last_sequence = last_sequence "
                    f"+ %s{touch} WHERE id = %s AND EXISTS (SELECT FROM t){guard} "
                    "RETURNING last_sequence)")
        checks.append("(SELECT count(*) FROM s) = 1")
    elif writes.lane is not None:
        raise Unsupported("a lane guard without the conversation's row")
    for index, execution in enumerate(writes.created):
        ctes.append(sql.insert(f"x{index}", execution, params, source="t"))
    for index, message in enumerate(writes.messages):
        sequence = f"s.last_sequence - {count - 1 - index}"
        ctes.append(sql.insert(f"m{index}", message, params, source="s",
                            computed={"sequence": (sequence, [])}))
    if writes.events:
        ctes.append(sql.insert_events(writes.events, params))
    for index, move in enumerate(writes.moves):
        assignments = sql.assign(ToolExecution, move.fields, params, db)
        placeholders = ", ".join(["%s"] * len(move.expected))
        ctes.append(f"u{index} AS (UPDATE {sql.table(ToolExecution)} SET {assignments} "
                    f"WHERE id = %s AND status IN ({placeholders}) AND EXISTS (SELECT FROM t) "
                    "RETURNING 1)")
        params += [move.execution_id, *move.expected]
        checks.append(f"(SELECT count(*) FROM u{index}) = 1")
    if writes.lane is not None:  # its parameters follow every CTE's
        buffered, buffered_params = _BUFFERED.fragment(conversation_id, turn_id)
        checks.append(f"NOT EXISTS ({buffered})")
        params += buffered_params
    last = "(SELECT last_sequence FROM s)" if count or writes.touch else "NULL::bigint"
    text = f"WITH {', '.join(ctes)} SELECT turnkit_step_guard({' AND '.join(checks)}), {last}"
    if writes.returning:  # one row, whether or not the guard holds (it raises if not)
        text += ", t.* FROM (SELECT) AS one LEFT JOIN t ON true"
    return text, params


def send(turn_id: str, root_id: str, conversation_id: str, fence: int, known: Ledger | None,
         writes: StepWrites, *, savepoint: bool = True) -> bool:
    """Send the step; False (nothing written) when its fence or ledger moved.

    ``known`` None: the caller holds the tree lock inside its transaction (nothing can move,
    so a refusal would be a bug: it raises). Fills in the sequences of the step's messages and
    marks its rows saved. Inside a transaction, a refused statement is sent in a savepoint,
    so the transaction stays usable, unless the caller rolls it back itself (not
    ``savepoint``).
    """
    text, params = statement(turn_id, root_id, conversation_id, fence, known, writes)
    row = send_guarded(text, params, guarded=known is not None, savepoint=savepoint)
    if row is None:
        return False
    db = sql.db()
    if writes.returning:
        writes.returned = row[2:]
    last = row[1]
    first = 0 if last is None else int(last) - len(writes.messages) + 1
    for index, message in enumerate(writes.messages):
        message.sequence = first + index
    for obj in (*writes.messages, *writes.created, *writes.events):
        obj._state.adding = False
        obj._state.db = db.alias
    return True


def quantized(amount: Decimal) -> Decimal:
    """``amount`` as a cost column stores it (8 decimal places, half away from zero)."""
    return amount.quantize(Decimal("1e-8"), rounding="ROUND_HALF_UP")


__all__ = ["GUARD_FAILED", "Move", "StepWrites", "Unsupported", "claim_write", "insert_claimed",
           "quantized", "send", "statement", "submit_write", "transition_write"]
