"""The TURNKIT settings object, the system checks on it and the agent registry.

The checks are run with ``tags=["turnkit"]``: only ours. (A bare ``run_checks()`` also runs
Django's model checks, which since Django 6.0 get every database alias by default and open a
connection, e.g. SQLite's JSONField probe; that is why these tests once failed on 6.1.)
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import types
import typing
from decimal import Decimal
from pathlib import Path

import pytest
from django.core.checks import ERROR, CheckMessage, run_checks
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connection
from django.test import override_settings

from turnkit_django import Agent, ConfigurationError, register
from turnkit_django.agents.registry import get_agent, unregister
from turnkit_django.checks import TAG, check_sqlite_mode
from turnkit_django.conf import (
    CLEANERS,
    DEFAULTS,
    TurnkitSettings,
    suggest,
    turnkit_settings,
)
from turnkit_django.models import Turn
from turnkit_django.store.limits import LIMIT_OPTIONS
from turnkit_django.testing import ScriptedClient

REPO = Path(__file__).resolve().parents[2]


def errors(turnkit: object) -> list[CheckMessage]:
    """The error-level messages of turnkit's checks for ``settings.TURNKIT = turnkit``."""
    with override_settings(TURNKIT=turnkit):
        return [m for m in run_checks(tags=[TAG]) if m.level >= ERROR]


def by_id(turnkit: object) -> dict[str, str]:
    return {m.id: f"{m.msg} {m.hint}" for m in errors(turnkit) if m.id}


# --------------------------------------------------------------------------- the object


def test_defaults_are_read_lazily_and_follow_override_settings():
    assert turnkit_settings.MAX_DEPTH == 3
    with override_settings(TURNKIT={"MAX_DEPTH": 7, "MAX_SPEND": "0.25", "LEASE": 90}):
        assert turnkit_settings.MAX_DEPTH == 7
        assert turnkit_settings.MAX_SPEND == Decimal("0.25")
        assert turnkit_settings.LEASE == 90.0 and isinstance(turnkit_settings.LEASE, float)
        assert turnkit_settings.HEARTBEAT_INTERVAL == DEFAULTS["HEARTBEAT_INTERVAL"]
    assert turnkit_settings.MAX_DEPTH == 3


def conforms(value: object, hint: object) -> bool:
    """Whether ``value`` has the declared type ``hint`` (unions, Mapping[...], Callable[...])."""
    origin = typing.get_origin(hint)
    if origin in (typing.Union, types.UnionType):
        return any(conforms(value, arg) for arg in typing.get_args(hint))
    if hint is type(None):
        return value is None
    if hint is object:
        return True
    if origin is not None:
        return isinstance(value, origin)
    assert isinstance(hint, type)
    return isinstance(value, hint) and not (hint is int and isinstance(value, bool))


def test_every_key_has_a_declared_type_that_its_value_satisfies():
    hints = typing.get_type_hints(TurnkitSettings)
    assert set(hints) == set(DEFAULTS) == set(CLEANERS)
    given = {"MAX_SPEND": 5, "LEASE": 61, "TOOL_TIMEOUT": 9,
             "AUTHORIZATION_POLICY": "tests.orchestration.deny", "COMPACTION": {"threshold": 0.5}}
    for turnkit in ({}, given):
        with override_settings(TURNKIT=turnkit):
            for key, hint in hints.items():
                assert conforms(getattr(turnkit_settings, key), hint), (key, hint)


def test_import_strings_are_resolved_on_access():
    with override_settings(TURNKIT={"CLIENT": "turnkit_django.testing.ScriptedClient"}):
        assert turnkit_settings.CLIENT is ScriptedClient


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="NOT_A_SETTING"):
        turnkit_settings.NOT_A_SETTING  # noqa: B018


def test_reading_a_bad_value_raises_a_configuration_error_naming_key_and_value():
    with override_settings(TURNKIT={"MAX_SPEND": "lots"}):
        with pytest.raises(ConfigurationError, match=r"MAX_SPEND.*'lots'"):
            turnkit_settings.MAX_SPEND  # noqa: B018
    with override_settings(TURNKIT=["LEASE", 60]):
        with pytest.raises(ConfigurationError, match="must be a dict"):
            turnkit_settings.LEASE  # noqa: B018


def test_changing_the_setting_rebuilds_the_default_client():
    from turnkit_django.clients import default_client

    first, second = ScriptedClient(), ScriptedClient()
    with override_settings(TURNKIT={"CLIENT": first}):
        assert default_client() is first
    with override_settings(TURNKIT={"CLIENT": second}):
        assert default_client() is second


# --------------------------------------------------------------------------- checks


def test_a_clean_configuration_has_no_errors():
    assert errors({}) == []
    assert errors(None) == []


def test_every_key_accepts_a_valid_value():
    valid = {
        "DEFAULT_MODEL": "claude-haiku-5-5", "CLIENT": ScriptedClient(), "MAX_ITERATIONS": 1,
        "MAX_DEPTH": 0, "MAX_TOOL_EXECUTIONS": 5, "MAX_TOOL_EXECUTIONS_BY_NAME": {"a": 0},
        "MAX_SPEND": "0.25", "TIMEOUT": 0.5, "HEARTBEAT_INTERVAL": 1, "LEASE": 3.0,
        "RECONCILE_INTERVAL": 2, "MAX_RECOVERY_ATTEMPTS": 0, "MAINTENANCE_BATCH_SIZE": 1,
        "AUTHORIZATION_POLICY": "tests.orchestration.deny", "COST_RATES": {"m": {"input": 1}},
        "QUEUE": "q", "DISPATCHER": "tests.dispatch.record", "COMPACTION": False,
        "PROMPT_DATA_MAX_CHARS": 10, "TOOL_TIMEOUT": 30, "MODEL_TIMEOUT": 120.5,
        "COST_CALCULATOR": "tests.orchestration.deny", "MEDIA_STORAGE": "default",
        "PROVIDER_LIMITS": {"anthropic": {"concurrency": 2}},
        "LIMITS_REDIS_URL": "redis://localhost:6379/1",
        "TENANT_LIMITS": {"key": "tests.orchestration.deny", "concurrency": 20},
        "STREAMING": False,
        "TRACING": {"capture_content": True},
        "DELTA_CHANNEL": "redis://localhost:6379/1",
    }
    assert set(valid) == set(DEFAULTS)
    assert errors(valid) == []
    assert errors({"MAX_SPEND": Decimal("1.5"), "COMPACTION": {"threshold": 0.5}}) == []


@pytest.mark.parametrize(
    ("typo", "meant"),
    [("LEASES", "LEASE"), ("MAX_ITERATION", "MAX_ITERATIONS"), ("lease", "LEASE"),
     ("HEARTBEATINTERVAL", "HEARTBEAT_INTERVAL"), ("MAX_SPENDING", "MAX_SPEND"),
     ("DEFAULT-MODEL", "DEFAULT_MODEL"), ("RECONCILE_INTERVALS", "RECONCILE_INTERVAL")],
)
def test_unknown_keys_get_the_closest_key_as_a_hint(typo, meant):
    assert suggest(typo) == meant
    found = by_id({typo: 1})
    assert f"Unknown TURNKIT setting {typo!r}" in found["turnkit.E001"]
    assert f"Did you mean {meant!r}?" in found["turnkit.E001"]


def test_an_unknown_key_like_no_other_lists_the_known_keys():
    found = by_id({"SOMETHING_ELSE": 1, 7: "x"})
    assert "Known keys: " in found["turnkit.E001"] and "LEASE" in found["turnkit.E001"]
    assert len([m for m in errors({"SOMETHING_ELSE": 1, 7: "x"}) if m.id == "turnkit.E001"]) == 2


BAD_VALUES = [
    ("DEFAULT_MODEL", "", "turnkit.E012"),
    ("DEFAULT_MODEL", 42, "turnkit.E012"),
    ("DEFAULT_MODEL", " claude-sonnet-5-5", "turnkit.E012"),
    ("DEFAULT_MODEL", "m" * 201, "turnkit.E012"),
    ("CLIENT", "no.such.module.Client", "turnkit.E007"),
    ("CLIENT", 42, "turnkit.E013"),
    ("MAX_ITERATIONS", 0, "turnkit.E003"),
    ("MAX_ITERATIONS", 2.5, "turnkit.E003"),
    ("MAX_ITERATIONS", "25", "turnkit.E003"),
    ("MAX_ITERATIONS", True, "turnkit.E003"),
    ("MAX_DEPTH", -1, "turnkit.E003"),
    ("MAX_TOOL_EXECUTIONS", 0, "turnkit.E003"),
    ("MAX_TOOL_EXECUTIONS", 2**40, "turnkit.E003"),
    ("MAX_TOOL_EXECUTIONS_BY_NAME", ["search"], "turnkit.E008"),
    ("MAX_TOOL_EXECUTIONS_BY_NAME", {7: 1}, "turnkit.E008"),
    ("MAX_SPEND", "lots", "turnkit.E011"),
    ("MAX_SPEND", -1, "turnkit.E011"),
    ("MAX_SPEND", "NaN", "turnkit.E011"),
    ("MAX_SPEND", True, "turnkit.E011"),
    ("MAX_SPEND", [5], "turnkit.E011"),
    ("TIMEOUT", 0, "turnkit.E003"),
    ("TIMEOUT", float("inf"), "turnkit.E003"),
    ("TIMEOUT", "300", "turnkit.E003"),
    ("TIMEOUT", None, "turnkit.E003"),
    ("HEARTBEAT_INTERVAL", -1, "turnkit.E003"),
    ("LEASE", "sixty", "turnkit.E003"),
    ("LEASE", 10**12, "turnkit.E003"),
    ("RECONCILE_INTERVAL", "two", "turnkit.E003"),
    ("MAX_RECOVERY_ATTEMPTS", -1, "turnkit.E003"),
    ("MAX_RECOVERY_ATTEMPTS", 1.5, "turnkit.E003"),
    ("MAINTENANCE_BATCH_SIZE", 0, "turnkit.E003"),
    ("AUTHORIZATION_POLICY", "no.such.policy", "turnkit.E007"),
    ("AUTHORIZATION_POLICY", 42, "turnkit.E013"),
    ("COST_RATES", [], "turnkit.E006"),
    ("QUEUE", "", "turnkit.E012"),
    ("QUEUE", None, "turnkit.E012"),
    ("QUEUE", " turnkit ", "turnkit.E012"),
    ("QUEUE", "turn kit", "turnkit.E012"),
    ("QUEUE", "turnkit,other", "turnkit.E012"),
    ("DISPATCHER", "no.such.dispatcher", "turnkit.E007"),
    ("DISPATCHER", 7, "turnkit.E013"),
    ("COST_CALCULATOR", "no.such.price", "turnkit.E007"),
    ("COST_CALCULATOR", 7, "turnkit.E013"),
    ("COMPACTION", "yes", "turnkit.E020"),
    ("COMPACTION", None, "turnkit.E020"),
    ("PROMPT_DATA_MAX_CHARS", 0, "turnkit.E003"),
    ("TOOL_TIMEOUT", 0, "turnkit.E003"),
    ("TOOL_TIMEOUT", "30", "turnkit.E003"),
    ("MODEL_TIMEOUT", -5, "turnkit.E003"),
    ("MEDIA_STORAGE", "nowhere", "turnkit.E021"),
    ("MEDIA_STORAGE", 7, "turnkit.E021"),
    ("PROVIDER_LIMITS", [], "turnkit.E024"),
    ("LIMITS_REDIS_URL", "amqp://localhost", "turnkit.E024"),
    ("TENANT_LIMITS", {"key": "tests.orchestration.deny"}, "turnkit.E023"),
    ("TENANT_LIMITS", {"key": "tests.orchestration.deny", "concurrency": 0}, "turnkit.E023"),
    ("TENANT_LIMITS", {"key": 7, "concurrency": 20}, "turnkit.E023"),
    ("TENANT_LIMITS", {"key": "no.such.tenant_of", "concurrency": 20}, "turnkit.E007"),
    ("TENANT_LIMITS", [20], "turnkit.E023"),
    ("STREAMING", "yes", "turnkit.E026"),
    ("TRACING", "yes", "turnkit.E025"),
    ("TRACING", {"capture_contents": True}, "turnkit.E025"),
    ("TRACING", {"capture_content": "no"}, "turnkit.E025"),
    ("DELTA_CHANNEL", "amqp://localhost", "turnkit.E027"),
    ("DELTA_CHANNEL", "redis://", "turnkit.E027"),
]


@pytest.mark.parametrize(("key", "value", "expected"), BAD_VALUES,
                         ids=[f"{k}={v!r}" for k, v, _ in BAD_VALUES])
def test_a_bad_value_is_an_error_naming_the_key_and_the_value(key, value, expected):
    found = errors({key: value})
    assert [m.id for m in found] == [expected]
    (message,) = found
    assert f"TURNKIT[{key!r}]" in message.msg
    assert repr(value) in message.msg
    assert message.hint and message.hint.strip()


def test_every_key_has_a_bad_value_case():
    assert {key for key, _, _ in BAD_VALUES} | {"COST_RATES", "COMPACTION"} == set(DEFAULTS)


@pytest.mark.parametrize(
    ("turnkit", "expected", "fragment"),
    [
        ({"MAX_TOOL_EXECUTIONS_BY_NAME": {"search": -1, "ok": 2}}, "turnkit.E008",
         "TURNKIT['MAX_TOOL_EXECUTIONS_BY_NAME']['search'] must be an integer from 0 to "
         "2147483647; got -1"),
        ({"MAX_TOOL_EXECUTIONS_BY_NAME": {"fetch": "3"}}, "turnkit.E008", "['fetch']"),
        ({"COST_RATES": {"m": {"input": "x"}}}, "turnkit.E006", "COST_RATES['m']['input'] = 'x'"),
        ({"COST_RATES": {"m": {"prompt": "1"}}}, "turnkit.E006", "unknown keys ['prompt']"),
        ({"COMPACTION": {"threshold": 2}}, "turnkit.E020", "threshold"),
        ({"COMPACTION": {"threshold": True}}, "turnkit.E020", "threshold"),
        ({"COMPACTION": {"enabled": "false"}}, "turnkit.E020", "enabled must be True or False"),
        ({"COMPACTION": {"model": 5}}, "turnkit.E020", "compaction model must be a model name"),
        ({"QUEUE": " turnkit "}, "turnkit.E012", "must be a queue name without spaces or commas"),
        ({"DEFAULT_MODEL": "claude-sonnet-5-5\n"}, "turnkit.E012",
         "without surrounding whitespace"),
        ({"HEARTBEAT_INTERVAL": 10, "LEASE": 20}, "turnkit.E004", "LEASE"),
        ({"RECONCILE_INTERVAL": 60, "LEASE": 60}, "turnkit.E005", "RECONCILE_INTERVAL"),
        ({"COST_CALCULATOR": "no.such.module.price"}, "turnkit.E007", "COST_CALCULATOR"),
        ({"COST_RATES": {"m": {"thinking": "many"}}}, "turnkit.E006", "thinking"),
        ({"COST_RATES": {5: {"input": 1}}}, "turnkit.E006", "keyed by model names"),
        ({"COST_RATES": {"m": {"input": "1e20", "output": "1"}}}, "turnkit.E006",
         "COST_RATES['m']['input'] = '1e20' is more than 1000000 USD per million tokens"),
    ],
)
def test_entries_and_combinations_are_named(turnkit, expected, fragment):
    found = by_id(turnkit)
    assert list(found) == [expected]
    assert fragment in found[expected]


@pytest.mark.parametrize("value", [["LEASE", 60], "LEASE=60", 42, ("a", "b")])
def test_turnkit_that_is_not_a_dict_is_one_error(value):
    assert list(by_id(value)) == ["turnkit.E002"]
    assert repr(value) in by_id(value)["turnkit.E002"]


WILD = [["a"], "x", {"LEASE": "two", "RECONCILE_INTERVAL": "two", "MAX_SPEND": "lots"},
        {"MAX_TOOL_EXECUTIONS_BY_NAME": {None: object()}}, {"COMPACTION": {"x": 1}},
        {"CLIENT": "turnkit_django.nothing_here.Client"}, {"COST_RATES": {"m": []}}, {1: 2}]


@pytest.mark.django_db
@pytest.mark.parametrize("value", WILD, ids=[repr(v)[:30] for v in WILD])
def test_manage_py_check_reports_and_never_crashes(value):
    """``manage.py check`` (all of Django's checks, deploy ones too) fails with our ids only."""
    with override_settings(TURNKIT=value), pytest.raises(SystemCheckError) as raised:
        call_command("check", "--deploy", verbosity=0)
    assert "turnkit.E0" in str(raised.value)


def test_a_broken_turnkit_does_not_stop_a_project_celery_module_from_importing(tmp_path):
    """The project's celery.py runs before Django is set up and calls beat_schedule()."""
    (tmp_path / "broken_settings.py").write_text(
        "from tests.settings import *  # noqa\nTURNKIT = ['LEASE', 60]\n")
    script = textwrap.dedent("""
        import os
        os.environ["DJANGO_SETTINGS_MODULE"] = "broken_settings"
        from celery import Celery

        app = Celery("project")
        app.config_from_object("django.conf:settings", namespace="CELERY")
        from turnkit_django.celery import beat_schedule

        app.conf.beat_schedule = {**beat_schedule()}
        app.autodiscover_tasks()
        import django

        django.setup()
        from django.core.management import call_command

        call_command("check")
    """)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(REPO)])}
    env.pop("DJANGO_SETTINGS_MODULE", None)
    done = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120, check=False)
    assert done.returncode == 1, done.stderr
    # One traceback: the check's own error, raised by call_command, not an import-time crash.
    assert done.stderr.count("Traceback") == 1, done.stderr
    raised = [line for line in done.stderr.splitlines() if "Error:" in line and ":" in line[:60]]
    assert raised[0].startswith("django.core.management.base.SystemCheckError"), done.stderr
    assert "(turnkit.E002) settings.TURNKIT must be a dict" in done.stderr


def test_sqlite_without_immediate_mode_is_an_error(monkeypatch):
    options = dict(connection.settings_dict.get("OPTIONS") or {})
    options.pop("transaction_mode", None)
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    ids = {m.id for m in check_sqlite_mode(None)}
    assert ids == {"turnkit.E010"}
    assert "turnkit.E010" in {m.id for m in run_checks(tags=[TAG])}  # not only with --database



@pytest.mark.parametrize("options", [["transaction_mode", "IMMEDIATE"], "IMMEDIATE"])
def test_sqlite_options_that_are_not_a_dict_are_reported_not_raised(monkeypatch, options):
    """``manage.py check`` must report a broken setting: OPTIONS that is not a dict raised
    AttributeError out of the check."""
    monkeypatch.setitem(connection.settings_dict, "OPTIONS", options)
    (message,) = check_sqlite_mode(None)
    assert message.id == "turnkit.E010"
    assert "OPTIONS" in message.msg and "must be a dict" in message.msg

# --------------------------------------------------------------------------- registry, agents


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


#: Every bad value of a limit setting, as the agent option that overrides it (None there means
#: "use the setting", so it is not a bad option).
SETTING_OF = {key: option for option, (key, _) in LIMIT_OPTIONS.items()}
BAD_LIMITS = [(SETTING_OF[key], value) for key, value, _ in BAD_VALUES
              if key in SETTING_OF and value is not None] + [
    ("max_spend", "lots"), ("timeout", -1), ("max_iterations", 0),
    ("max_tool_executions_by_name", {"ping": -1}), ("max_iterations", "3"), ("max_depth", -1),
]


@pytest.mark.parametrize(("option", "value"), BAD_LIMITS,
                         ids=[f"{o}={v!r}" for o, v in BAD_LIMITS])
def test_agent_limits_follow_the_rules_of_their_settings_at_construction(option, value):
    """Not at the first run: there "lots" raised decimal.InvalidOperation and 0 or -1 failed
    every run with BudgetExceeded before any model call."""
    with pytest.raises(ConfigurationError) as raised:
        Agent("spendy", instructions="x", **{option: value})
    message = str(raised.value)
    assert message.startswith(f"agent 'spendy': {option}")
    assert repr(value) in message or repr(value["ping"]) in message
    assert f"leave {option} out to use TURNKIT[{LIMIT_OPTIONS[option][0]!r}]" in message


@pytest.mark.django_db
def test_valid_agent_limits_are_kept_and_a_run_cannot_override_them():
    agent = Agent("limited", max_iterations=1, max_tool_executions=1, max_depth=0, timeout=0.5,
                  max_spend="0", max_tool_executions_by_name={"ping": 0},
                  client=ScriptedClient([]))
    assert agent.limits().max_spend == Decimal(0) and agent.limits().timeout == 0.5
    with pytest.raises(TypeError, match="max_iterations"):
        agent.run("go", max_iterations=5)  # type: ignore[call-arg]
    assert not Turn.objects.exists()


@pytest.mark.parametrize("name", ["bad name!", "9lives", "a" * 65, "name\n", "émile", "a.b"])
def test_agent_names_follow_the_providers_tool_name_rules(name):
    with pytest.raises(ConfigurationError, match="letters, digits, '_' or '-'") as raised:
        Agent(name)
    assert repr(name) in str(raised.value)


def test_valid_agent_names_are_accepted_and_usable_as_sub_agent_tools():
    child = Agent("note-writer_2", description="Writes notes.")
    parent = Agent("a" * 64, sub_agents=[child])
    assert "note-writer_2" in parent.tool_table()


@pytest.mark.parametrize(("turnkit", "fragment"), [
    ({"MAX_ITERATIONS": 1099511627776},
     "TURNKIT['MAX_ITERATIONS'] must be a positive integer up to 2147483647; got 1099511627776."),
    ({"MAX_DEPTH": 2**31},
     "TURNKIT['MAX_DEPTH'] must be an integer from 0 to 2147483647; got 2147483648."),
    ({"TIMEOUT": 1e12}, "TURNKIT['TIMEOUT'] must be a positive number of seconds up to "
                        "315360000 (ten years); got 1000000000000.0."),
    ({"MAX_TOOL_EXECUTIONS_BY_NAME": {"search": 2**31}},
     "TURNKIT['MAX_TOOL_EXECUTIONS_BY_NAME']['search'] must be an integer from 0 to "
     "2147483647; got 2147483648."),
])
def test_a_value_too_large_is_an_error_naming_the_bound(turnkit, fragment):
    (message,) = errors(turnkit)
    assert fragment in message.msg


@pytest.mark.parametrize(("option", "value", "fragment"), [
    ("max_iterations", 1099511627776, "max_iterations must be a positive integer up to "
                                      "2147483647; got 1099511627776."),
    ("timeout", 1e12, "timeout must be a positive number of seconds up to 315360000 (ten "
                      "years); got 1000000000000.0."),
])
def test_an_agent_limit_too_large_names_the_same_bound(option, value, fragment):
    with pytest.raises(ConfigurationError) as raised:
        Agent("too_large", instructions="x", **{option: value})
    assert fragment in str(raised.value)
