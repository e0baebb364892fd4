"""Root-wide budgets: checks and reservations against the tree's ledger, under the tree lock.

Every function takes the :class:`~turnkit_django.store.Ledger` read by the tree lock and returns
the :class:`~turnkit_django.store.LedgerDelta` to write with the transaction's other writes, so
parallel children across workers can never overrun a limit.

A turn that is not its tree's root can also have limits of its own: the count limits its agent
set itself (``Turn.options["own_limits"]``, see :func:`own_budget`). They are checked after the
tree's, against the turn's own counts kept in its state (``TurnState.iterations``,
``tool_executions``, ``tool_counts``). Only the turn's claim writes its state, so these counts
need no lock: the fence that guards every write of the turn guards them.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from ..exceptions import BudgetExceeded
from ..store import GRANTED, Ledger, LedgerDelta, Reservation, TurnState
from ..store.limits import (
    DEPTH,
    ITERATIONS,
    MAX_COST,
    SPEND,
    SPEND_UNRECORDABLE,
    TIMEOUT,
    TOOL_EXECUTIONS,
    Limits,
    resolve_limits,
)

logger = logging.getLogger("turnkit_django.cost")


def limits_of(ledger: Ledger) -> Limits:
    return ledger.limits if ledger.limits is not None else resolve_limits()


def check_open(ledger: Ledger, *, spend: bool = True) -> None:
    """Raise if the tree ran out of time (on the database clock) or (unless ``spend`` is
    False) money."""
    if ledger.deadline_at is not None and ledger.now >= ledger.deadline_at:
        raise BudgetExceeded(TIMEOUT, limit="timeout")
    limit = limits_of(ledger).max_spend
    if spend and limit is not None and ledger.spend >= limit:
        raise BudgetExceeded(SPEND, limit="max_spend")
    if spend and ledger.spend >= MAX_COST:
        raise BudgetExceeded(SPEND_UNRECORDABLE, limit="max_spend")


@dataclass(frozen=True)
class OwnBudget:
    """A child turn's own count limits (None: not set) and its counts so far."""

    max_iterations: int | None
    max_tool_executions: int | None
    max_tool_executions_by_name: Mapping[str, int]
    state: TurnState

    def iteration_denied(self) -> BudgetExceeded | None:
        limit = self.max_iterations
        if limit is not None and self.state.iterations >= limit:
            return BudgetExceeded(ITERATIONS, limit="max_iterations")
        return None

    def tool_denied(self, name: str) -> str | None:
        state = self.state
        limit = self.max_tool_executions
        if limit is not None and state.tool_executions >= limit:
            return TOOL_EXECUTIONS
        cap = self.max_tool_executions_by_name.get(name)
        if cap is not None and state.tool_counts.get(name, 0) >= cap:
            return f"maximum executions reached for tool {name!r}"
        return None


def own_budget(options: Mapping[str, Any] | None, state: TurnState) -> OwnBudget | None:
    """The own limits of the turn with ``options`` (None: it has none) with its ``state``."""
    own = (options or {}).get("own_limits")
    if not own:
        return None
    by_name = own.get("max_tool_executions_by_name") or {}
    iterations, tools = own.get("max_iterations"), own.get("max_tool_executions")
    return OwnBudget(None if iterations is None else int(iterations),
                     None if tools is None else int(tools),
                     {str(k): int(v) for k, v in by_name.items()}, state)


def reserve_next(ledger: Ledger, own: OwnBudget | None) -> tuple[LedgerDelta, Reservation]:
    """Check time and money and reserve the next model call.

    Returns the delta and the reservation: granted, or the denial the model step raises. It is
    kept in the turn's state and written by the transaction that moves the turn to the model
    phase, so a resumed turn never reserves twice and a denial does not undo what that
    transaction records. ``own``: the turn's own limits (:func:`own_budget`), checked after the
    tree's; required, so that no reservation forgets a sub-agent's own limits.
    """
    try:
        check_open(ledger)
        if ledger.iterations >= limits_of(ledger).max_iterations:
            raise BudgetExceeded(ITERATIONS, limit="max_iterations")
        denied = None if own is None else own.iteration_denied()
        if denied is not None:
            raise denied
    except BudgetExceeded as exc:
        return LedgerDelta(), Reservation.denied(exc)
    ledger.iterations += 1
    return LedgerDelta(iterations=1), GRANTED


def recheck(reservation: Reservation, ledger: Ledger) -> Reservation:
    """A granted reservation, checked again for time and money (a claim after a pause)."""
    if not reservation.granted:
        return reservation
    try:
        check_open(ledger)
    except BudgetExceeded as exc:
        return Reservation.denied(exc)
    return reservation


def reserve_tool(ledger: Ledger, name: str, own: OwnBudget | None,
                 ) -> tuple[LedgerDelta, str | None]:
    """Reserve a tool slot; return the delta, or an empty one and the denial's reason.

    With ``own`` (the turn's own limits), a granted slot also counts for the turn: its caller
    writes ``own.state.counted(name)`` with the slot, in the same transaction."""
    limits = limits_of(ledger)
    if ledger.tool_executions >= limits.max_tool_executions:
        return LedgerDelta(), TOOL_EXECUTIONS
    cap = limits.max_tool_executions_by_name.get(name)
    if cap is not None and ledger.tool_counts.get(name, 0) >= cap:
        return LedgerDelta(), f"maximum executions reached for tool {name!r}"
    denied = None if own is None else own.tool_denied(name)
    if denied is not None:
        return LedgerDelta(), denied
    counts = {**ledger.tool_counts, name: ledger.tool_counts.get(name, 0) + 1}
    ledger.tool_executions += 1  # a later reservation in the same transaction sees it
    ledger.tool_counts = counts
    return LedgerDelta(tool_executions=1, tool_counts=counts), None


def check_depth(ledger: Ledger, child_depth: int) -> None:
    if child_depth > limits_of(ledger).max_depth:
        raise BudgetExceeded(DEPTH, limit="max_depth")


def spent(ledger: Ledger, cost: Decimal | None) -> tuple[LedgerDelta, Decimal | None]:
    """Charge ``cost`` to the tree (seen by later checks in the same transaction); return the
    delta and the cost to charge the turn.

    A cost that would take the tree's spend past :data:`MAX_COST` (a provider's or a
    calculator's absurd report, absurd rates), where a cost column would overflow, is not
    written: the turn gets an unknown cost, and the tree's spend is set to the ceiling, so the
    next model or tool call fails the run with ``BudgetExceeded`` (:func:`check_open`),
    whatever ``max_spend`` is."""
    if not cost:
        return LedgerDelta(), cost
    if ledger.spend + cost > MAX_COST:
        logger.error("a call charged to turn tree %r costs %s USD, which takes its spend past "
                     "%s USD, the most a run can record; its cost is recorded as unknown and "
                     "the run stops", ledger.root_id, cost, MAX_COST)
        ceiling = MAX_COST - ledger.spend
        ledger.spend = MAX_COST
        return LedgerDelta(spend=ceiling), None
    ledger.spend += cost
    return LedgerDelta(spend=cost), cost


__all__ = ["OwnBudget", "check_depth", "check_open", "limits_of", "own_budget", "recheck",
           "reserve_next", "reserve_tool", "spent"]
