"""Cost of model usage from per-model rates (USD per million tokens).

Rates come from ``TURNKIT["COST_RATES"]`` first, then the built-in table. A model with no rate,
or usage of a token kind the rate does not price, has an *unknown* cost (``None``), never zero.
"""

from __future__ import annotations

from collections.abc import Mapping
from decimal import Decimal
from typing import Any

from .clients.base import Usage

RATE_KEYS = ("input", "output", "cache_read", "cache_write")
_MILLION = Decimal(1_000_000)

# USD per million tokens, from the providers' public price lists.
BUILTIN_RATES: dict[str, dict[str, str]] = {
    "claude-opus-4-1": {"input": "15", "output": "75", "cache_read": "1.50", "cache_write": "18.75"},
    "claude-opus-4-5": {"input": "5", "output": "25", "cache_read": "0.50", "cache_write": "6.25"},
    "claude-sonnet-4-5": {"input": "3", "output": "15", "cache_read": "0.30", "cache_write": "3.75"},
    "claude-sonnet-4": {"input": "3", "output": "15", "cache_read": "0.30", "cache_write": "3.75"},
    "claude-haiku-4-5": {"input": "1", "output": "5", "cache_read": "0.10", "cache_write": "1.25"},
    "gpt-4o": {"input": "2.50", "output": "10", "cache_read": "1.25"},
    "gpt-4o-mini": {"input": "0.15", "output": "0.60", "cache_read": "0.075"},
    "gpt-4.1": {"input": "2", "output": "8", "cache_read": "0.50"},
    "gpt-4.1-mini": {"input": "0.40", "output": "1.60", "cache_read": "0.10"},
    "gpt-5": {"input": "1.25", "output": "10", "cache_read": "0.125"},
    "gpt-5-mini": {"input": "0.25", "output": "2", "cache_read": "0.025"},
}


def rates_for(model: str) -> Mapping[str, Any] | None:
    """Return the rate table entry for ``model`` (settings first, then built-in), or None."""
    from .conf import turnkit_settings

    configured = turnkit_settings.COST_RATES or {}
    if model in configured:
        return configured[model]  # type: ignore[no-any-return]
    if model in BUILTIN_RATES:
        return BUILTIN_RATES[model]
    # Dated snapshots ("claude-sonnet-4-5-20250929") use the undated family's rates.
    for name in sorted(BUILTIN_RATES, key=len, reverse=True):
        if model.startswith(name + "-"):
            return BUILTIN_RATES[name]
    return None


def compute_cost(model: str, usage: Usage, reported: str | None = None) -> Decimal | None:
    """Return the cost of ``usage`` on ``model`` in USD, or None when it cannot be known."""
    if reported is not None:
        return Decimal(str(reported))
    rates = rates_for(model)
    if rates is None:
        return None
    counts = {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_write": usage.cache_write_tokens,
    }
    total = Decimal(0)
    for key, tokens in counts.items():
        if not tokens:
            continue
        rate = rates.get(key)
        if rate is None:
            return None
        total += Decimal(str(rate)) * tokens / _MILLION
    return total.quantize(Decimal("0.00000001"))


def validate_rates(rates: Any) -> list[str]:
    """Return problems with a ``COST_RATES`` value (used by the system check)."""
    problems: list[str] = []
    if not isinstance(rates, Mapping):
        return ["COST_RATES must be a dict of model name -> rates"]
    for model, entry in rates.items():
        if not isinstance(entry, Mapping):
            problems.append(f"COST_RATES[{model!r}] must be a dict")
            continue
        unknown = set(entry) - set(RATE_KEYS)
        if unknown:
            problems.append(f"COST_RATES[{model!r}] has unknown keys {sorted(unknown)}")
        for key, value in entry.items():
            try:
                if Decimal(str(value)) < 0:
                    problems.append(f"COST_RATES[{model!r}][{key!r}] is negative")
            except ArithmeticError:
                problems.append(f"COST_RATES[{model!r}][{key!r}] is not a number")
    return problems
