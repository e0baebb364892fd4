"""Cost breakdowns: what a turn or a whole tree cost, per model and per turn.

Each turn's ``usage`` record keeps, per model, the calls charged to it (its own steps, policy
judges, summaries and evaluations) with their tokens and cost (:mod:`..clients.accounting`). A
breakdown adds them up; its ``cost`` is None ("cost unknown") as soon as one part could not be
priced, while ``known_cost`` keeps the subtotal that could.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from decimal import Decimal
from typing import TypedDict, cast

from ..base.serialization import JsonMapping, JsonObject, decimal_text
from ..clients import Usage
from ..clients.accounting import ModelCost, by_model
from ..models import Turn

_FIELDS = ("pk", "agent_name", "model", "depth", "parent_turn_id", "usage", "cost",
           "cost_unknown")


class CostRow(TypedDict):
    """A turn as a breakdown reads it: ``Turn.objects.values(*_FIELDS)``."""

    pk: str
    agent_name: str
    model: str
    depth: int
    parent_turn_id: str | None
    usage: JsonObject | None
    cost: Decimal
    cost_unknown: bool


class TurnCostJson(TypedDict):
    """:meth:`TurnCost.as_dict`: amounts as decimal strings."""

    turn_id: str
    agent: str
    depth: int
    parent_turn_id: str | None
    usage: dict[str, int]
    cost: str | None
    known_cost: str
    by_model: dict[str, JsonMapping]


class CostBreakdownJson(TypedDict):
    """:meth:`CostBreakdown.as_dict`: amounts as decimal strings."""

    usage: dict[str, int]
    cost: str | None
    known_cost: str
    by_model: dict[str, JsonMapping]
    by_turn: list[TurnCostJson]


@dataclass(frozen=True)
class TurnCost:
    """One turn's part of a breakdown."""

    turn_id: str
    agent: str
    depth: int
    parent_turn_id: str | None
    usage: Usage
    cost: Decimal | None
    known_cost: Decimal
    by_model: dict[str, ModelCost] = field(default_factory=dict)

    def as_dict(self) -> TurnCostJson:
        return {"turn_id": self.turn_id, "agent": self.agent, "depth": self.depth,
                "parent_turn_id": self.parent_turn_id, "usage": self.usage.as_dict(),
                "cost": None if self.cost is None else decimal_text(self.cost),
                "known_cost": decimal_text(self.known_cost),
                "by_model": {name: m.as_dict() for name, m in self.by_model.items()}}


@dataclass(frozen=True)
class CostBreakdown:
    """Usage and cost of a set of turns: totals, per model, and per turn (in tree order)."""

    usage: Usage
    cost: Decimal | None
    known_cost: Decimal
    by_model: dict[str, ModelCost]
    by_turn: tuple[TurnCost, ...]

    @property
    def unknown(self) -> bool:
        """Whether some part could not be priced (then ``cost`` is None)."""
        return self.cost is None

    @property
    def thinking_tokens(self) -> int:
        return self.usage.thinking_tokens

    def as_dict(self) -> CostBreakdownJson:
        return {"usage": self.usage.as_dict(),
                "cost": None if self.cost is None else decimal_text(self.cost),
                "known_cost": decimal_text(self.known_cost),
                "by_model": {name: m.as_dict() for name, m in self.by_model.items()},
                "by_turn": [t.as_dict() for t in self.by_turn]}


def _turn_cost(row: CostRow) -> TurnCost:
    cost = None if row["cost_unknown"] else Decimal(row["cost"])
    return TurnCost(row["pk"], row["agent_name"], row["depth"], row["parent_turn_id"],
                    Usage.from_dict(row["usage"]), cost, Decimal(row["cost"]),
                    by_model(row["usage"], fallback_model=row["model"], cost=cost))


def breakdown(turns: Iterable[CostRow]) -> CostBreakdown:
    """Add up turns given as rows of ``Turn.objects.values(*_FIELDS)``."""
    parts = tuple(_turn_cost(row) for row in turns)
    models: dict[str, ModelCost] = {}
    usage, known, unknown = Usage(), Decimal(0), False
    for part in parts:
        usage, known = usage + part.usage, known + part.known_cost
        unknown = unknown or part.cost is None
        for name, entry in part.by_model.items():
            models[name] = models[name] + entry if name in models else entry
    return CostBreakdown(usage, None if unknown else known, known, models, parts)


def cost_breakdown(root_turn_id: str | None = None, *, turn_id: str | None = None,
                   conversation_id: str | None = None,
                   agent_name: str | None = None) -> CostBreakdown:
    """The breakdown of a tree (by its root's id), one turn, a conversation's turns, or every
    turn of an agent; one query."""
    given = {"root_turn_id": root_turn_id, "turn_id": turn_id,
             "conversation_id": conversation_id, "agent_name": agent_name}
    chosen = {k: v for k, v in given.items() if v is not None}
    if len(chosen) != 1:
        raise TypeError(f"cost_breakdown() takes exactly one of {', '.join(given)}")
    if root_turn_id is not None:
        rows = Turn.objects.tree(root_turn_id)
    else:
        key, value = chosen.popitem()
        rows = Turn.objects.filter(**{"pk" if key == "turn_id" else key: value}).order_by(
            "created_at", "id")
    return breakdown(cast("Iterable[CostRow]", rows.values(*_FIELDS)))  # the query's rows


__all__ = ["CostBreakdown", "CostBreakdownJson", "CostRow", "TurnCost", "TurnCostJson",
           "breakdown", "cost_breakdown"]
