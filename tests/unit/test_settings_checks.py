"""The TURNKIT settings object, the system checks and the agent registry."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.checks import run_checks
from django.db import connection
from django.test import override_settings

from turnkit_django import Agent, ConfigurationError, register
from turnkit_django.agents.registry import get_agent, unregister
from turnkit_django.checks import check_sqlite_mode
from turnkit_django.conf import DEFAULTS, turnkit_settings
from turnkit_django.testing import ScriptedClient


def check_ids(**turnkit: object) -> dict[str, str]:
    with override_settings(TURNKIT=turnkit):
        return {m.id: f"{m.msg} {m.hint}" for m in run_checks() if m.id.startswith("turnkit")}


def test_defaults_are_read_lazily_and_follow_override_settings():
    assert turnkit_settings.MAX_DEPTH == 3
    with override_settings(TURNKIT={"MAX_DEPTH": 7, "MAX_SPEND": "0.25"}):
        assert turnkit_settings.MAX_DEPTH == 7
        assert turnkit_settings.MAX_SPEND == Decimal("0.25")
        assert turnkit_settings.LEASE == DEFAULTS["LEASE"]
    assert turnkit_settings.MAX_DEPTH == 3


def test_import_strings_are_resolved_on_access():
    with override_settings(TURNKIT={"CLIENT": "turnkit_django.testing.ScriptedClient"}):
        assert turnkit_settings.CLIENT is ScriptedClient


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NOT_A_SETTING"):
        turnkit_settings.NOT_A_SETTING  # noqa: B018


def test_a_clean_configuration_has_no_errors():
    assert check_ids() == {}


def test_unknown_keys_are_rejected_with_a_suggestion():
    ids = check_ids(LEASE_SECONDS=30, HEARTBEATINTERVAL=5)
    assert "turnkit.E001" in ids
    assert "HEARTBEAT_INTERVAL" in ids["turnkit.E001"] or "Known keys" in ids["turnkit.E001"]


@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        ({"LEASE": "sixty"}, "turnkit.E003"),
        ({"MAX_ITERATIONS": 2.5}, "turnkit.E003"),
        ({"HEARTBEAT_INTERVAL": 10, "LEASE": 20}, "turnkit.E004"),
        ({"RECONCILE_INTERVAL": 60, "LEASE": 60}, "turnkit.E005"),
        ({"COST_RATES": {"m": {"input": "x"}}}, "turnkit.E006"),
        ({"COST_RATES": {"m": {"prompt": "1"}}}, "turnkit.E006"),
        ({"CLIENT": "no.such.module.Client"}, "turnkit.E007"),
        ({"COST_CALCULATOR": "no.such.module.price"}, "turnkit.E007"),
        ({"COST_RATES": {"m": {"thinking": "many"}}}, "turnkit.E006"),
        ({"MAX_TOOL_EXECUTIONS_BY_NAME": {"search": -1}}, "turnkit.E008"),
    ],
)
def test_each_misconfiguration_has_an_error_with_a_hint(settings, expected):
    ids = check_ids(**settings)
    assert expected in ids
    assert ids[expected].strip()


def test_sqlite_without_immediate_mode_is_an_error(monkeypatch):
    options = dict(connection.settings_dict.get("OPTIONS") or {})
    options.pop("transaction_mode", None)
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    ids = {m.id for m in check_sqlite_mode(None)}
    assert ids == {"turnkit.E010"}


def test_registering_a_different_definition_under_a_taken_name_raises():
    first = register(Agent("registry_probe", instructions="one"))
    try:
        assert register(first) is first  # the same object again is harmless
        with pytest.raises(ConfigurationError, match="registry_probe"):
            register(Agent("registry_probe", instructions="two"))
        assert get_agent("registry_probe") is first
    finally:
        unregister("registry_probe")


def test_an_unregistered_agent_tells_what_to_do():
    with pytest.raises(ConfigurationError, match=r"agents\.py"):
        get_agent("nobody_registered_this")


def test_agent_definitions_are_validated():
    with pytest.raises(ConfigurationError, match="non-empty name"):
        Agent("")
    with pytest.raises(ConfigurationError, match="prompt_mode"):
        Agent("x", prompt_mode="loud")
    with pytest.raises(ConfigurationError, match="not a tool"):
        Agent("x", tools=[print])  # type: ignore[list-item]
