"""Root-wide limits: one ledger per turn tree, kept on the root row, changed under the tree lock."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import F

from .exceptions import BudgetExceeded, ConfigurationError

ITERATIONS = "maximum iterations reached"
TOOL_EXECUTIONS = "maximum tool executions reached"
SPEND = "cost limit reached"
DEPTH = "maximum sub-agent depth reached"
TIMEOUT = "turn timed out"


@dataclass(frozen=True)
class Limits:
    """The limits of one turn tree, snapshotted into the root turn's options at creation."""

    max_iterations: int
    max_tool_executions: int
    max_tool_executions_by_name: dict[str, int] = field(default_factory=dict)
    max_spend: Decimal | None = None
    max_depth: int = 3
    timeout: float | None = None

    def as_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["max_spend"] = None if self.max_spend is None else str(self.max_spend)
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Limits:
        spend = data.get("max_spend")
        return cls(
            max_iterations=int(data["max_iterations"]),
            max_tool_executions=int(data["max_tool_executions"]),
            max_tool_executions_by_name=dict(data.get("max_tool_executions_by_name") or {}),
            max_spend=None if spend is None else Decimal(str(spend)),
            max_depth=int(data.get("max_depth", 3)),
            timeout=data.get("timeout"),
        )

    def deadline(self, start: datetime) -> datetime | None:
        return None if not self.timeout else start + timedelta(seconds=float(self.timeout))


def resolve_limits(**overrides: Any) -> Limits:
    """Return limits from explicit values (None means: use the TURNKIT setting)."""
    from .conf import turnkit_settings as s

    def pick(name: str, setting: str) -> Any:
        value = overrides.get(name)
        return getattr(s, setting) if value is None else value

    limits = Limits(
        max_iterations=pick("max_iterations", "MAX_ITERATIONS"),
        max_tool_executions=pick("max_tool_executions", "MAX_TOOL_EXECUTIONS"),
        max_tool_executions_by_name=dict(
            pick("max_tool_executions_by_name", "MAX_TOOL_EXECUTIONS_BY_NAME") or {}
        ),
        max_spend=None
        if pick("max_spend", "MAX_SPEND") is None
        else Decimal(str(pick("max_spend", "MAX_SPEND"))),
        max_depth=pick("max_depth", "MAX_DEPTH"),
        timeout=pick("timeout", "TIMEOUT"),
    )
    for name in ("max_iterations", "max_tool_executions", "max_depth"):
        value = getattr(limits, name)
        if not isinstance(value, int) or value < 0:
            raise ConfigurationError(f"{name} must be a non-negative integer, got {value!r}")
    return limits


def ledger_limits(ledger: dict[str, Any]) -> Limits:
    return Limits.from_json(ledger["options"]["limits"])


def check_open(ledger: dict[str, Any], at: datetime) -> None:
    """Raise if the tree ran out of time or money (called under the tree lock)."""
    deadline = ledger.get("deadline_at")
    if deadline is not None and at >= deadline:
        raise BudgetExceeded(TIMEOUT, limit="timeout")
    limits = ledger_limits(ledger)
    if limits.max_spend is not None and Decimal(ledger["tree_spend"]) >= limits.max_spend:
        raise BudgetExceeded(SPEND, limit="max_spend")


def reserve_iteration(ledger: dict[str, Any]) -> dict[str, Any]:
    """Return the root update reserving one model call, or raise BudgetExceeded."""
    if ledger["tree_iterations"] >= ledger_limits(ledger).max_iterations:
        raise BudgetExceeded(ITERATIONS, limit="max_iterations")
    return {"tree_iterations": F("tree_iterations") + 1}


#: ``Turn.state["reservation"]`` once the next model call's iteration is reserved.
GRANTED = "granted"


def reserve_next(ledger: dict[str, Any], at: datetime) -> tuple[dict[str, Any], Any]:
    """Check time and money and reserve the next model call (under the tree lock).

    Returns (root update, reservation record): the record is :data:`GRANTED`, or the denial
    ``{"reason", "limit"}`` that :func:`refuse` raises at the model step. It is kept in
    ``Turn.state`` and written in the transaction that moves the turn to the model phase, so a
    resumed turn never reserves twice and a denial does not undo what that transaction records.
    """
    try:
        check_open(ledger, at)
        update = reserve_iteration(ledger)
    except BudgetExceeded as exc:
        return {}, {"reason": exc.reason, "limit": exc.limit}
    ledger["tree_iterations"] += 1
    return update, GRANTED


def recheck(record: Any, ledger: dict[str, Any], at: datetime) -> Any:
    """A granted reservation, checked again for time and money (a claim after a pause)."""
    if record != GRANTED:
        return record
    try:
        check_open(ledger, at)
    except BudgetExceeded as exc:
        return {"reason": exc.reason, "limit": exc.limit}
    return record


def refuse(record: Any) -> None:
    """Raise the BudgetExceeded a stored reservation denial stands for."""
    if isinstance(record, dict):
        raise BudgetExceeded(record["reason"], limit=record["limit"])


def reserve_tool(ledger: dict[str, Any], name: str) -> tuple[dict[str, Any] | None, str | None]:
    """Return (root update, None) reserving a tool slot, or (None, reason) when denied."""
    limits = ledger_limits(ledger)
    if ledger["tree_tool_executions"] >= limits.max_tool_executions:
        return None, TOOL_EXECUTIONS
    counts = dict(ledger["tree_tool_counts"] or {})
    cap = limits.max_tool_executions_by_name.get(name)
    if cap is not None and counts.get(name, 0) >= cap:
        return None, f"maximum executions reached for tool {name!r}"
    counts[name] = counts.get(name, 0) + 1
    return {"tree_tool_executions": F("tree_tool_executions") + 1, "tree_tool_counts": counts}, None


def check_depth(ledger: dict[str, Any], child_depth: int) -> None:
    if child_depth > ledger_limits(ledger).max_depth:
        raise BudgetExceeded(DEPTH, limit="max_depth")


def limit_of(reason: str) -> str:
    return {
        ITERATIONS: "max_iterations",
        TOOL_EXECUTIONS: "max_tool_executions",
        SPEND: "max_spend",
        DEPTH: "max_depth",
        TIMEOUT: "timeout",
    }.get(reason, "max_tool_executions_by_name")
