"""Cost from usage: built-in rates, COST_RATES overrides, snapshots, long-prompt bands."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.test import override_settings

from turnkit_django.clients import Usage
from turnkit_django.clients.cost import BUILTIN_RATES, compute_cost, rates_for, validate_rates


def test_cost_of_a_cached_claude_call() -> None:
    # Sonnet 5.5: $2 in, $10 out, $0.10 cache read, $2.50 cache write per million tokens.
    usage = Usage(
        input_tokens=1000, output_tokens=500, cache_read_tokens=20_000, cache_write_tokens=4000
    )
    assert compute_cost("claude-sonnet-5-5", usage) == Decimal("0.01900000")


def test_cost_of_an_openai_call_with_cached_tokens() -> None:
    # gpt-5.4-mini: $0.75 in, $0.075 cached, $4.50 out; cached tokens are not in input_tokens.
    usage = Usage(input_tokens=128, output_tokens=9, cache_read_tokens=1920)
    assert compute_cost("gpt-5.4-mini", usage) == Decimal("0.00028050")


@pytest.mark.parametrize(
    ("snapshot", "family"),
    [
        ("claude-sonnet-4-5-20250929", "claude-sonnet-4-5"),
        ("claude-haiku-4-5-20251001", "claude-haiku-4-5"),
        ("claude-opus-4-20250514", "claude-opus-4"),
        ("gpt-4o-2024-08-06", "gpt-4o"),
        ("gpt-5.4-mini-2026-03-17", "gpt-5.4-mini"),
    ],
)
def test_dated_snapshots_use_the_family_rate(snapshot: str, family: str) -> None:
    assert rates_for(snapshot) is BUILTIN_RATES[family]


@pytest.mark.parametrize(
    "model", ["gpt-5.4-turbo", "claude-sonnet-5-7", "claude-sonnet-4-5-latest", "llama3.2", ""]
)
def test_unknown_models_have_unknown_cost_not_zero(model: str) -> None:
    assert rates_for(model) is None
    assert compute_cost(model, Usage(input_tokens=10, output_tokens=10)) is None


def test_a_token_kind_without_a_rate_makes_the_cost_unknown() -> None:
    # gpt-5.5-pro has no cached-input price.
    assert compute_cost("gpt-5.5-pro", Usage(input_tokens=10)) == Decimal("0.00030000")
    assert compute_cost("gpt-5.5-pro", Usage(input_tokens=10, cache_read_tokens=5)) is None


def test_no_usage_on_a_known_model_costs_zero() -> None:
    assert compute_cost("claude-haiku-4-5", Usage()) == Decimal("0E-8")


def test_reported_cost_wins() -> None:
    assert compute_cost("anything/unknown", Usage(input_tokens=5), reported="0.003075") == Decimal(
        "0.003075"
    )


def test_long_prompt_band_prices_the_whole_call() -> None:
    # Haiku 5.5: up to 100k prompt tokens $0.10/$0.50; above, $0.50/$2.50 on every token.
    at_threshold = Usage(input_tokens=60_000, cache_read_tokens=40_000, output_tokens=1000)
    over = Usage(input_tokens=60_001, cache_read_tokens=40_000, output_tokens=1000)
    assert compute_cost("claude-haiku-5-5", at_threshold) == Decimal("0.00690000")
    assert compute_cost("claude-haiku-5-5", over) == Decimal("0.03450050")


def test_cost_rates_setting_overrides_and_extends() -> None:
    rates = {
        "claude-sonnet-5-5": {"input": "1", "output": "1", "cache_read": "1", "cache_write": "1"},
        "llama3.2": {"input": "0", "output": "0"},
    }
    usage = Usage(input_tokens=1_000_000, output_tokens=1_000_000)
    with override_settings(TURNKIT={"COST_RATES": rates}):
        assert compute_cost("claude-sonnet-5-5", usage) == Decimal("2.00000000")
        assert compute_cost("claude-sonnet-5-5-20261001", usage) == Decimal("2.00000000")
        assert compute_cost("llama3.2", usage) == Decimal("0E-8")
    assert compute_cost("claude-sonnet-5-5", usage) == Decimal("12.00000000")
    assert compute_cost("llama3.2", usage) is None


def test_every_builtin_rate_is_valid() -> None:
    assert validate_rates(BUILTIN_RATES) == []


def test_validate_rates_reports_problems() -> None:
    problems = validate_rates(
        {
            "a": {"input": "-1", "outptu": "2"},
            "b": "3",
            "c": {"input": "x"},
            "d": {"input": "1", "long_prompt": {"input": "2"}},
            "e": {"input": "1", "long_prompt": {"threshold": 10, "long_prompt": {}}},
        }
    )
    assert problems == [
        "COST_RATES['a'] has unknown keys ['outptu']",
        "COST_RATES['a']['input'] = '-1' is negative",
        "COST_RATES['b'] = '3' must be a dict",
        "COST_RATES['c']['input'] = 'x' is not a number",
        "COST_RATES['d']['long_prompt'] needs a 'threshold' (prompt tokens)",
        "COST_RATES['e']['long_prompt'] has unknown keys ['long_prompt']",
        "COST_RATES['e']['long_prompt']['long_prompt'] = {} is not a number",
    ]
    assert validate_rates({"f": {"input": "Infinity"}}) == [
        "COST_RATES['f']['input'] = 'Infinity' is not a number"]
    assert validate_rates([]) == ["COST_RATES must be a dict of model name -> rates"]


def test_validate_rates_wants_model_names_and_bounded_rates() -> None:
    """A rate that passed E006 could price one call past what a cost column holds."""
    assert validate_rates({5: {"input": "1"}, "": {"input": "1"}}) == [
        "COST_RATES is keyed by model names (strings), not 5",
        "COST_RATES is keyed by model names (strings), not ''"]
    assert validate_rates({"m": {"input": "1e20", "output": 1_000_001}}) == [
        "COST_RATES['m']['input'] = '1e20' is more than 1000000 USD per million tokens",
        "COST_RATES['m']['output'] = 1000001 is more than 1000000 USD per million tokens"]
    assert validate_rates({"m": {"input": "1e999999"}}) == [
        "COST_RATES['m']['input'] = '1e999999' is more than 1000000 USD per million tokens"]
    # The bound is inclusive, and a band's threshold is tokens, not a rate.
    assert validate_rates({"m": {"input": "1000000", "long_prompt": {
        "threshold": 5_000_000, "input": "1000000"}}}) == []


@pytest.mark.parametrize("reported", ["lots", "NaN", "-1", "Infinity", ""])
def test_a_reported_cost_that_is_no_amount_is_unknown_never_an_error(reported: str) -> None:
    assert compute_cost("claude-sonnet-4-5", Usage(input_tokens=1), reported=reported) is None


@pytest.mark.parametrize("rate", ["1e999999", "x", [1]])
def test_unchecked_rates_that_cannot_price_a_call_give_an_unknown_cost(rate: object) -> None:
    with override_settings(TURNKIT={"COST_RATES": {"m": {"input": rate}}}):
        assert compute_cost("m", Usage(input_tokens=10**6)) is None


def test_a_cost_too_large_for_a_column_is_returned_unrounded_for_the_charge_to_refuse() -> None:
    with override_settings(TURNKIT={"COST_RATES": {"m": {"input": "1e20"}}}):
        assert compute_cost("m", Usage(input_tokens=82)) == Decimal("8.2e15")
    assert compute_cost("m", Usage(), reported="1e30") == Decimal("1e30")


@pytest.mark.parametrize("threshold", ["2e5", "200000.0", 2e5])
def test_a_band_threshold_the_check_accepts_prices_the_call(threshold: object) -> None:
    """E006 reads a threshold as a number ("2e5" passes), so pricing must read it the same way
    instead of raising ValueError from int() at every call of the model."""
    rates = {"m": {"input": "1", "long_prompt": {"threshold": threshold, "input": "2"}}}
    assert validate_rates(rates) == []
    with override_settings(TURNKIT={"COST_RATES": rates}):
        assert compute_cost("m", Usage(input_tokens=10**5)) == Decimal("0.1")
        assert compute_cost("m", Usage(input_tokens=3 * 10**5)) == Decimal("0.6")


@pytest.mark.parametrize("band", [{"input": "2"}, {"threshold": "x", "input": "2"},
                                  {"threshold": float("inf"), "input": "2"}])
def test_an_unchecked_band_without_a_usable_threshold_gives_an_unknown_cost(band: dict) -> None:
    """A worker runs no system checks: a band E006 refuses makes the cost unknown (logged),
    like an unchecked rate, instead of raising KeyError or ValueError at every call."""
    assert validate_rates({"m": {"input": "1", "long_prompt": band}})
    with override_settings(TURNKIT={"COST_RATES": {"m": {"input": "1", "long_prompt": band}}}):
        assert compute_cost("m", Usage(input_tokens=10)) is None


def test_unknown_rate_keys_of_mixed_types_are_named_not_a_type_error() -> None:
    """sorted() of {1, "x"} raised TypeError out of the system check E006."""
    assert validate_rates({"m": {1: "2", "x": "3"}})[0] == (
        "COST_RATES['m'] has unknown keys [1, 'x']")
    assert validate_rates({"m": {"long_prompt": {1: 2, "threshold": 5}}})[0] == (
        "COST_RATES['m']['long_prompt'] has unknown keys [1]")
    assert validate_rates({"m": {"long_prompt": {1: 2, "a": 1, "threshold": 5}}})[0] == (
        "COST_RATES['m']['long_prompt'] has unknown keys [1, 'a']")
