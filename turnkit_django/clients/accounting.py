"""A turn's usage record: token totals and, per model, its calls, tokens and cost.

``Turn.usage`` holds the token totals of every call charged to the turn (its own steps, policy
judges, summaries, evaluations) and ``by_model``: per model name, the number of calls, their
tokens and their cost (``cost`` is the known subtotal; ``cost_unknown`` is set once one call
could not be priced). The runtime adds each call in memory and writes the whole record with the
call's charge, so keeping the breakdown costs no extra statement.
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal

from ..base.serialization import JsonMapping, JsonObject, decimal_text
from ._http import member
from .protocol import Usage, json_int

BY_MODEL = "by_model"


@dataclass(frozen=True)
class ModelCost:
    """What calls to one model cost: ``cost`` is None when any of them could not be priced."""

    model: str
    calls: int
    usage: Usage
    cost: Decimal | None
    known_cost: Decimal

    def __add__(self, other: ModelCost) -> ModelCost:
        unknown = self.cost is None or other.cost is None
        known = self.known_cost + other.known_cost
        return ModelCost(self.model, self.calls + other.calls, self.usage + other.usage,
                         None if unknown else known, known)

    def as_dict(self) -> JsonObject:
        return {"model": self.model, "calls": self.calls, "usage": {**self.usage.as_dict()},
                "cost": None if self.cost is None else decimal_text(self.cost),
                "known_cost": decimal_text(self.known_cost)}


def add_call(record: JsonMapping | None, usage: Usage, model: str,
             cost: Decimal | None) -> JsonObject:
    """Return ``record`` (a turn's ``usage``) with one more call of ``model`` added."""
    record = record or {}
    totals = (Usage.from_dict(record) + usage).as_dict()
    models = dict(member(record, BY_MODEL))
    entry = member(models, model)
    tokens = (Usage.from_dict(entry) + usage).as_dict()
    known = Decimal(str(entry.get("cost") or 0)) + (cost or 0)
    models[model] = {**tokens, "calls": json_int(entry.get("calls")) + 1, "cost": str(known),
                     "cost_unknown": bool(entry.get("cost_unknown")) or cost is None}
    return {**totals, BY_MODEL: models}


def by_model(record: JsonMapping | None, *, fallback_model: str,
             cost: Decimal | None) -> dict[str, ModelCost]:
    """The per-model costs of a usage record; a record written before the breakdown existed
    is one entry for ``fallback_model`` with the turn's ``cost`` (None: unknown)."""
    record = record or {}
    models = record.get(BY_MODEL)
    if not isinstance(models, dict):
        usage = Usage.from_dict(record)
        if not usage.total_tokens and not cost:
            return {}
        return {fallback_model: ModelCost(fallback_model, 0, usage, cost, cost or Decimal(0))}
    out = {}
    for name in models:
        entry = member(models, name)
        known = Decimal(str(entry.get("cost") or 0))
        out[str(name)] = ModelCost(str(name), json_int(entry.get("calls")), Usage.from_dict(entry),
                                   None if entry.get("cost_unknown") else known, known)
    return out


__all__ = ["BY_MODEL", "ModelCost", "add_call", "by_model"]
