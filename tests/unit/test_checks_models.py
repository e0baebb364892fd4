"""Configured models the installed provider SDK lists as deprecated (W004) or retired (W005)."""

from __future__ import annotations

import typing
from datetime import date

import pytest
from anthropic.types import ModelParam
from django.core.checks import run_checks
from django.test import override_settings
from django.utils import timezone

from turnkit_django import Agent, register
from turnkit_django.agents.registry import unregister
from turnkit_django.checks import TAG, end_of_life, model_messages, sdk_deprecations
from turnkit_django.conf import DEFAULTS

TABLE = {"old-model": "November 30th, 2026", "older-model": "June 1st, 2025",
         "odd-model": "sometime soon"}


def warnings_for(**turnkit: object) -> dict[str, str]:
    with override_settings(TURNKIT=turnkit):
        return {m.id: m.msg for m in run_checks(tags=[TAG]) if m.id in ("turnkit.W004",
                                                                         "turnkit.W005")}


def test_the_sdk_ships_a_deprecation_table():
    table = sdk_deprecations()
    assert table, "the installed anthropic SDK has no DEPRECATED_MODELS table"
    assert all(end_of_life(text) for text in table.values()), table


@pytest.mark.parametrize(
    ("text", "expected"),
    [("November 30th, 2026", date(2026, 11, 30)), ("January 22nd, 2027", date(2027, 1, 22)),
     ("June 1st, 2025", date(2025, 6, 1)), ("March 3rd, 2026", date(2026, 3, 3)),
     ("2026-02-01", date(2026, 2, 1)), ("sometime soon", None)],
)
def test_end_of_life_texts_are_parsed(text, expected):
    assert end_of_life(text) == expected


def test_deprecated_before_and_retired_from_the_end_of_life_date():
    models = {"old-model": "TURNKIT['DEFAULT_MODEL']", "older-model": "agent 'x'",
              "odd-model": "agent 'y'", "current-model": "agent 'z'"}
    before = model_messages(models, TABLE, date(2026, 11, 29))
    assert [(m.id, m.msg.split(" is ")[0]) for m in before] == [
        ("turnkit.W004", "TURNKIT['DEFAULT_MODEL']"), ("turnkit.W005", "agent 'x'"),
        ("turnkit.W004", "agent 'y'")]
    on_the_day = model_messages(models, TABLE, date(2026, 11, 30))
    assert on_the_day[0].id == "turnkit.W005"
    assert "2026-11-30" in on_the_day[0].msg and on_the_day[0].hint


def test_the_default_model_is_current_in_the_installed_sdk():
    assert DEFAULTS["DEFAULT_MODEL"] in typing.get_args(typing.get_args(ModelParam)[0])
    assert DEFAULTS["DEFAULT_MODEL"] not in sdk_deprecations()
    assert warnings_for() == {}


def test_a_deprecated_default_model_from_the_sdk_table_is_reported():
    model, text = sorted(sdk_deprecations().items())[0]
    eol = end_of_life(text)
    expected = "turnkit.W005" if eol and eol <= timezone.now().date() else "turnkit.W004"
    found = warnings_for(DEFAULT_MODEL=model)
    assert list(found) == [expected]
    assert "TURNKIT['DEFAULT_MODEL']" in found[expected] and repr(model) in found[expected]


def test_agents_models_are_checked_too():
    model = sorted(sdk_deprecations())[0]
    register(Agent("old_model_agent", model=model))
    try:
        (message,) = warnings_for().values()
        assert "agent 'old_model_agent'" in message
    finally:
        unregister("old_model_agent")
