"""Cost of model usage from per-model rates (USD per million tokens).

A call's cost is, in order: the cost the provider reported; else what
``TURNKIT["COST_CALCULATOR"]`` (``callable(usage, model)``) returns, unless it returns None;
else the rates, from ``TURNKIT["COST_RATES"]`` first, then the built-in table. A model with no
rate, or usage of a token kind the rate does not price, has an *unknown* cost (``None``), never
zero. A rate may price ``thinking`` tokens apart from the rest of the output (they are a part of
``output_tokens``); without a ``thinking`` rate they cost what output costs.

A rate may carry a ``long_prompt`` band, ``{"threshold": N, "input": ..., ...}``: a call whose
prompt (input + cache read + cache write tokens) is over ``threshold`` is priced entirely at the
band's rates, the way providers bill long-context requests. Pass the usage of one call.

Image models price image input apart from text input: their rates add ``image_input`` (for
``Usage.image_input_tokens``), and their ``output`` is the price of image output tokens.

Dated snapshots (``claude-sonnet-4-5-20250929``, ``gpt-4o-2024-08-06``) use the rate of the
undated name; nothing else is guessed from a prefix (``gpt-5.4-pro`` is not ``gpt-5.4``).
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping
from decimal import Decimal
from typing import Literal, Required, TypedDict

from ..base.serialization import JsonMapping
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from ..store.limits import MAX_COST
from .protocol import ModelResponse, Usage

logger = logging.getLogger("turnkit_django.cost")

RateKey = Literal["input", "output", "cache_read", "cache_write", "thinking", "image_input"]
RATE_KEYS: tuple[RateKey, ...] = ("input", "output", "cache_read", "cache_write", "thinking",
                                  "image_input")
BAND_KEY = "long_prompt"
_MILLION = Decimal(1_000_000)
_PLACES = Decimal("0.00000001")
#: The largest rate check E006 accepts, in USD per million tokens (one dollar a token): it keeps
#: a call's cost within a cost column unless its usage is billions of tokens.
MAX_RATE = Decimal(1_000_000)
_SNAPSHOT = re.compile(r"^(?P<name>.+?)-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


class Prices(TypedDict, total=False):
    """USD per million tokens of each kind (a kind left out is not priced: its cost is unknown)."""

    input: str
    output: str
    cache_read: str
    cache_write: str
    thinking: str
    image_input: str


class LongPromptBand(Prices, total=False):
    """The prices of a call whose prompt is over ``threshold`` tokens."""

    threshold: Required[int]


class ModelRate(Prices, total=False):
    """A model's rate, as in ``TURNKIT["COST_RATES"]`` (which also takes numbers for prices)."""

    long_prompt: LongPromptBand


def _rate(
    input: str, output: str, cache_read: str | None = None, cache_write: str | None = None,
    image_input: str | None = None,
) -> ModelRate:
    rate: ModelRate = {"input": input, "output": output}
    if cache_read is not None:
        rate["cache_read"] = cache_read
    if cache_write is not None:
        rate["cache_write"] = cache_write
    if image_input is not None:
        rate["image_input"] = image_input
    return rate


def _long(rate: ModelRate, threshold: int, prompt_x: str, output_x: str) -> ModelRate:
    """Add a long-prompt band: prompt-side rates times ``prompt_x``, output times ``output_x``."""
    band: LongPromptBand = {"threshold": threshold}
    for key in RATE_KEYS:
        price = rate.get(key)
        if price is not None:
            factor = Decimal(output_x if key == "output" else prompt_x)
            band[key] = format((Decimal(price) * factor).normalize(), "f")
    return {**rate, "long_prompt": band}


# USD per million tokens from the providers' price lists (Anthropic: cache_write is the 5-minute
# write, the TTL this package requests). Checked November 2026; override with COST_RATES.
_OPUS_45 = _rate("5", "25", "0.50", "6.25")
_OPUS_41 = _rate("15", "75", "1.50", "18.75")
_SONNET_4 = _long(_rate("3", "15", "0.30", "3.75"), 200_000, "2", "1.5")
_GPT_6_SOL = _long(_rate("2", "10", "0.10", "2.50"), 272_000, "2", "1.5")

BUILTIN_RATES: dict[str, ModelRate] = {
    # Anthropic
    "claude-fable-5-2": _rate("8", "40", "0.20", "10"),
    "claude-fable-5-1": _rate("10", "50", "0.25", "12.50"),
    "claude-mythos-5-1": _rate("10", "50", "0.25", "12.50"),
    "claude-fable-5": _rate("10", "50", "1", "12.50"),
    "claude-mythos-5": _rate("10", "50", "1", "12.50"),
    "claude-opus-5-5": _rate("4", "20", "0.20", "5"),
    "claude-opus-5": _OPUS_45,
    "claude-opus-4-8": _OPUS_45,
    "claude-opus-4-7": _OPUS_45,
    "claude-opus-4-6": _OPUS_45,
    "claude-opus-4-5": _OPUS_45,
    "claude-opus-4-1": _OPUS_41,
    "claude-opus-4": _OPUS_41,
    "claude-sonnet-5-5": _rate("2", "10", "0.10", "2.50"),
    "claude-sonnet-5": _rate("2", "10", "0.20", "2.50"),
    "claude-sonnet-4-6": _rate("3", "15", "0.30", "3.75"),
    "claude-sonnet-4-5": _SONNET_4,
    "claude-sonnet-4": _SONNET_4,
    "claude-haiku-5-5": _long(_rate("0.10", "0.50", "0.01", "0.125"), 100_000, "5", "5"),
    "claude-haiku-4-5": _rate("1", "5", "0.10", "1.25"),
    # OpenAI (cache_write only where the model bills cache writes)
    "gpt-6.2-sol": _GPT_6_SOL,
    "gpt-6.1-sol": _GPT_6_SOL,
    "gpt-6-sol": _long(_rate("2", "10", "0.20", "2.50"), 272_000, "2", "1.5"),
    "gpt-6-luna": _long(_rate("0.10", "0.50", "0.01", "0.125"), 272_000, "2", "1.5"),
    "gpt-6-astra": _long(_rate("10", "50", "1", "12.50"), 272_000, "2", "1.5"),
    "gpt-6.1-terra": _rate("1", "5", "0.05", "1.25"),
    "gpt-5.5": _rate("5", "30", "0.50"),
    "gpt-5.5-pro": _rate("30", "180"),
    "gpt-5.4": _rate("2.50", "15", "0.25"),
    "gpt-5.4-mini": _rate("0.75", "4.50", "0.075"),
    "gpt-5.4-nano": _rate("0.20", "1.25", "0.02"),
    "gpt-5.4-pro": _rate("30", "180"),
    "gpt-5.2": _rate("1.75", "14", "0.175"),
    "gpt-5.1": _rate("1.25", "10", "0.125"),
    "gpt-5": _rate("1.25", "10", "0.125"),
    "gpt-5-mini": _rate("0.25", "2", "0.025"),
    "gpt-5-nano": _rate("0.05", "0.40", "0.005"),
    "gpt-4.1": _rate("2", "8", "0.50"),
    "gpt-4.1-mini": _rate("0.40", "1.60", "0.10"),
    "gpt-4.1-nano": _rate("0.10", "0.40", "0.025"),
    "gpt-4o": _rate("2.50", "10", "1.25"),
    "gpt-4o-mini": _rate("0.15", "0.60", "0.075"),
    "o3": _rate("2", "8", "0.50"),
    "o4-mini": _rate("1.10", "4.40", "0.275"),
    # OpenAI image models: text input, image output, cached text input, image input. DALL-E is
    # billed per image, not per token, and reports no usage: its cost stays unknown.
    "gpt-image-1.5": _rate("5", "32", "1.25", image_input="8"),
    "gpt-image-1": _rate("5", "40", "1.25", image_input="10"),
    "gpt-image-1-mini": _rate("2", "8", "0.20", image_input="2.50"),
}


def rates_for(model: str) -> JsonMapping | None:
    """Return the rate entry for ``model`` (settings first, then built-in), or None."""
    configured = turnkit_settings.COST_RATES or {}
    names = [model]
    snapshot = _SNAPSHOT.match(model)
    if snapshot:
        names.append(snapshot.group("name"))
    for name in names:
        if name in configured:
            rate = configured[name]
            if not isinstance(rate, Mapping):
                raise ConfigurationError(
                    f"TURNKIT['COST_RATES'][{name!r}] is {rate!r}; give a dict of USD per "
                    "million tokens, for example {'input': '3', 'output': '15'}")
            return rate
        if name in BUILTIN_RATES:
            return BUILTIN_RATES[name]
    return None


def _prompt_tokens(usage: Usage) -> int:
    return (usage.input_tokens + usage.cache_read_tokens + usage.cache_write_tokens
            + usage.image_input_tokens)


def _amount(value: object, source: str, model: str) -> Decimal | None:
    """``value`` (a cost ``source`` gave for a call to ``model``) as USD, or None (unknown,
    logged) when it is not a finite amount >= 0. An amount too large for a cost column is
    returned as it is: the charge refuses it and stops the run
    (:func:`turnkit_django.runtime.budget.spent`)."""
    try:
        cost = Decimal(str(value).strip()) if not isinstance(value, bool) else None
    except ArithmeticError:
        cost = None
    if cost is None or not cost.is_finite() or cost < 0:
        logger.error("%s was %r for model %r; a cost is a non-negative number of USD; cost "
                     "unknown", source, value, model)
        return None
    return cost


def _stored(cost: Decimal | None) -> Decimal | None:
    """``cost`` to the 8 places a cost column keeps, when one can hold it."""
    return cost.quantize(_PLACES) if cost is not None and cost <= MAX_COST else cost


def _calculated(model: str, usage: Usage) -> tuple[bool, Decimal | None]:
    """Ask ``COST_CALCULATOR``: (answered, cost). It runs before the step that charges the
    call (never inside a transaction); a failure must not end the step: it is logged and the
    cost is unknown."""
    calculator = turnkit_settings.COST_CALCULATOR
    if calculator is None:
        return False, None
    try:
        value = calculator(usage, model)
    except Exception:
        logger.exception("TURNKIT['COST_CALCULATOR'] raised for model %r; cost unknown", model)
        return True, None
    if value is None:
        return False, None
    return True, _stored(_amount(value, "TURNKIT['COST_CALCULATOR']'s answer (return None to "
                                        "use COST_RATES)", model))


def compute_cost(model: str, usage: Usage, reported: str | None = None) -> Decimal | None:
    """Return the cost of one call's ``usage`` on ``model`` in USD, or None when unknown.

    It never raises for a bad amount: a reported cost, a calculator's answer or a rate that is
    not a number gives an unknown cost (logged); one too large for a cost column is returned
    unrounded, and charging it stops the run."""
    if reported is not None:
        return _amount(reported, "the provider's reported cost", model)
    answered, calculated = _calculated(model, usage)
    if answered:
        return calculated
    rates = rates_for(model)
    if rates is None:
        return None
    band = rates.get(BAND_KEY)
    if isinstance(band, Mapping):
        try:  # read as E006 reads it: any number ("2e5" too); a band it refuses prices nothing
            threshold = Decimal(str(band["threshold"]))
            if not threshold.is_finite():
                raise ArithmeticError(threshold)
            long_prompt = _prompt_tokens(usage) > threshold
        except (KeyError, ArithmeticError):
            logger.error("TURNKIT['COST_RATES'] has a long_prompt band without a numeric "
                         "threshold for model %r: %r (see check turnkit.E006); cost unknown",
                         model, band)
            return None
        if long_prompt:
            rates = band
    counts = {
        "input": usage.input_tokens,
        "output": usage.output_tokens,
        "cache_read": usage.cache_read_tokens,
        "cache_write": usage.cache_write_tokens,
        "image_input": usage.image_input_tokens,
    }
    if rates.get("thinking") is not None:  # a part of the output, priced apart
        counts["thinking"] = min(usage.thinking_tokens, usage.output_tokens)
        counts["output"] -= counts["thinking"]
    total = Decimal(0)
    for key, tokens in counts.items():
        if not tokens:
            continue
        rate = rates.get(key)
        if rate is None:
            return None
        try:
            total += Decimal(str(rate)) * tokens / _MILLION
        except ArithmeticError:  # a rate check E006 refuses: not a number, or so large it overflows
            logger.error("TURNKIT['COST_RATES'] cannot price %s tokens of model %r with %r "
                         "(see check turnkit.E006); cost unknown", key, model, rate)
            return None
    return _stored(_amount(total, "the cost from COST_RATES", model))


def response_cost(model: str, response: ModelResponse) -> Decimal | None:
    """:func:`compute_cost` of one model response: unknown (None) when the response carried no
    usage (``usage_reported`` False) and no reported cost, since its zero tokens were never
    counted; a made-up zero would read as a free call."""
    if not response.usage_reported and response.reported_cost is None:
        return None
    return compute_cost(model, response.usage, response.reported_cost)


def _rate_problems(where: str, entry: object, *, band_allowed: bool) -> list[str]:
    if not isinstance(entry, Mapping):
        return [f"{where} = {entry!r} must be a dict"]
    problems: list[str] = []
    allowed = set(RATE_KEYS) | ({BAND_KEY} if band_allowed else {"threshold"})
    unknown = set(entry) - allowed
    if unknown:
        problems.append(f"{where} has unknown keys {sorted(unknown, key=str)}")
    for key, value in entry.items():
        if key == BAND_KEY and band_allowed:
            problems += _rate_problems(f"{where}[{key!r}]", value, band_allowed=False)
            continue
        try:
            rate = Decimal(str(value))
            if not rate.is_finite():
                raise ArithmeticError(value)
            if rate < 0:
                problems.append(f"{where}[{key!r}] = {value!r} is negative")
            elif key != "threshold" and rate > MAX_RATE:
                problems.append(f"{where}[{key!r}] = {value!r} is more than {MAX_RATE} USD per "
                                "million tokens")
        except ArithmeticError:
            problems.append(f"{where}[{key!r}] = {value!r} is not a number")
    if not band_allowed and "threshold" not in entry:
        problems.append(f"{where} needs a 'threshold' (prompt tokens)")
    return problems


def validate_rates(rates: object) -> list[str]:
    """Return problems with a ``COST_RATES`` value (used by the system check)."""
    if not isinstance(rates, Mapping):
        return ["COST_RATES must be a dict of model name -> rates"]
    problems: list[str] = []
    for model, entry in rates.items():
        if not isinstance(model, str) or not model:
            problems.append(f"COST_RATES is keyed by model names (strings), not {model!r}")
            continue
        problems += _rate_problems(f"COST_RATES[{model!r}]", entry, band_allowed=True)
    return problems
