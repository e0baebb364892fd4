"""The columns a store write sets on a turn, named: what fenced writes and transitions pass on.

A value is what the column stores, or an expression the database evaluates in the same
statement (``F("fence") + 1``, ``Now()``): relative updates, so concurrent writers add up.
These are TypedDicts, so building and passing them costs what a plain dict does.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import TypedDict

from django.db.models import F
from django.db.models.expressions import Combinable
from django.db.models.functions import Now

from ..base.serialization import JsonMapping, JsonObject, JsonValue


class TerminalFields(TypedDict, total=False):
    """What a turn's terminal write keeps besides its status: the output (a failed turn keeps
    the candidate it was refused for) and the output policies' audit."""

    output_text: str
    output_data: JsonValue
    audit: JsonObject


class TurnFields(TerminalFields, total=False):
    """The writable columns of a turn, as a fenced write or a named transition sets them."""

    state: JsonObject
    usage: JsonObject
    cost: Decimal | Combinable
    cost_unknown: bool
    completed_at: datetime | Combinable
    updated_at: datetime | Combinable
    submitted_at: datetime
    started_at: datetime
    deadline_at: datetime | None
    fence: int | Combinable
    claimed_by: str
    fence_log: list[JsonObject]
    error: JsonObject
    controls: JsonMapping
    controls_pending: bool
    options: JsonObject
    recovery_attempts: int
    # The tree's ledger, on the root's row (see store.locks.LedgerDelta).
    tree_iterations: int | Combinable
    tree_tool_executions: int | Combinable
    tree_tool_counts: dict[str, int]
    tree_spend: Decimal | Combinable


@dataclass(frozen=True)
class Charge:
    """What a model response costs the turn: its new usage total and its cost (None: unknown)."""

    usage: JsonObject
    cost: Decimal | None

    def fields(self) -> TurnFields:
        fields: TurnFields = {"usage": self.usage}
        if self.cost is None:
            fields["cost_unknown"] = True
        else:
            fields["cost"] = F("cost") + self.cost
        return fields


def statement_time() -> Now:
    """The database's clock when the statement that writes it runs (``Now()``)."""
    return Now()


__all__ = ["Charge", "TerminalFields", "TurnFields", "statement_time"]
