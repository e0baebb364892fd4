"""Management commands given what no row can be: ids with a NUL or a lone surrogate (what a
shell hands Python for bytes that are not UTF-8), ids of the wrong kind, and a broken TURNKIT
setting read with --skip-checks. Each is a CommandError that says what to do (the command line
prints it without a traceback and exits 1), and nothing is written."""

from __future__ import annotations

import os
import subprocess
import sys
from io import StringIO
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from django.test import override_settings

from turnkit_django import Agent
from turnkit_django.models import Turn
from turnkit_django.testing import ScriptedClient, reply

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]

#: A NUL (PostgreSQL refuses it in any query), a lone surrogate (no database encodes it:
#: SQLite's driver raised UnicodeEncodeError), and a valid id with either appended.
UNSTORABLE = ["turn_\x00", "turn_\udcff", "conv_\ud800x"]


def run_command(*args: object, **options: object) -> str:
    out = StringIO()
    call_command(*args, stdout=out, **options)
    return out.getvalue()


def pending_run():
    return Agent("cmd_bad_input", client=ScriptedClient([reply("hi")])).prepare("hello")


@pytest.mark.parametrize("ident", UNSTORABLE, ids=["nul", "surrogate", "surrogate-conv"])
@pytest.mark.parametrize("command", [
    ("turnkit_inspect",), ("turnkit_cancel",), ("turnkit_verify", "--turn"),
    ("turnkit_verify", "--conversation"),
])
def test_an_id_no_database_stores_names_no_row(command, ident):
    run = pending_run()
    with pytest.raises(CommandError) as raised:
        run_command(*command, ident)
    message = str(raised.value)
    assert "NUL" in message or "surrogate" in message
    assert "turn_..." in message or "conv_..." in message  # what an id looks like
    assert Turn.objects.get(pk=run.id).status == "pending"


def test_cancel_given_a_conversation_id_says_how_to_find_its_turns():
    run = pending_run()
    with pytest.raises(CommandError, match=r"conversation id.*turnkit_inspect"):
        run_command("turnkit_cancel", run.conversation_id)
    with pytest.raises(CommandError, match=r"conversation id.*--conversation"):
        run_command("turnkit_verify", "--turn", run.conversation_id)
    with pytest.raises(CommandError, match=r"turn id.*--turn"):
        run_command("turnkit_verify", "--conversation", run.id)
    assert Turn.objects.get(pk=run.id).status == "pending"


BROKEN = {"MAINTENANCE_BATCH_SIZE": "many", "LEASE": -5, "RECONCILE_INTERVAL": "x"}


@pytest.mark.parametrize(("key", "command"), [
    ("MAINTENANCE_BATCH_SIZE", ("turnkit_prune", "--older-than", "1")),
    ("MAINTENANCE_BATCH_SIZE", ("turnkit_reconcile",)),
    ("LEASE", ("turnkit_reconcile",)),
    ("RECONCILE_INTERVAL", ("turnkit_reconcile", "--loop", "--passes", "1")),
    ("LEASE", ("turnkit_reconcile", "--loop", "--passes", "1")),
    ("MAINTENANCE_BATCH_SIZE", ("turnkit_cancel", "turn_x")),
])
def test_a_broken_setting_read_with_skip_checks_is_a_command_error(key, command):
    """call_command skips the system checks: the setting's own message, as a CommandError
    (InvalidSetting escaped prune and reconcile; --loop reported it every pass, forever)."""
    with override_settings(TURNKIT={key: BROKEN[key]}):
        with pytest.raises(CommandError, match=rf"TURNKIT\['{key}'\]"):
            run_command(*command, skip_checks=True)


def test_the_command_line_prints_no_traceback(tmp_path):
    """manage.py of the example project: an id the shell passed as bytes that are not UTF-8,
    and a broken setting with --skip-checks. Neither touches a table, so no migrate."""
    env = {**os.environ, "EXAMPLE_VAR_DIR": str(tmp_path)}
    env.pop("DATABASE_URL", None)
    env.pop("DJANGO_SETTINGS_MODULE", None)
    for args, extra, expected in [
        (["turnkit_inspect", "turn_\udcff"], {}, "surrogate"),
        (["turnkit_reconcile", "--skip-checks"], {"TURNKIT_RECONCILE_INTERVAL": "-1"},
         "RECONCILE_INTERVAL"),
    ]:
        done = subprocess.run([sys.executable, str(ROOT / "manage.py"), *args],
                              env={**env, **extra},
                              capture_output=True, text=True, timeout=120, cwd=ROOT)
        assert done.returncode == 1, done.stderr
        assert "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith("CommandError: ") and expected in done.stderr


@pytest.mark.parametrize("principal", [
    "NaN", "-Infinity", '{"user": NaN}', '{"user": "7\\u0000"}', '"\\ud800"', "[" * 100_000,
    '{"user": 7', "", float("nan"), {"user": object()}, {1: "x"},
], ids=["nan", "infinity", "nested-nan", "nul", "surrogate", "too-deep", "not-json", "empty",
        "keyword-nan", "keyword-object", "keyword-int-key"])
def test_cancel_refuses_a_principal_that_is_no_json_value_before_asking_the_policy(
        principal, settings):
    """``--principal NaN`` (Python's json reads NaN, Infinity, and strings no database stores)
    was accepted, handed to the policy and written into the cancelled turn's error; a nesting
    too deep was a RecursionError traceback. Each is a CommandError saying what to pass."""
    settings.TURNKIT = {**settings.TURNKIT, "AUTHORIZATION_POLICY":
                        "tests.unit.test_command_bad_input.recording_policy"}
    RECORDED.clear()
    run = pending_run()
    with pytest.raises(CommandError, match=r"--principal must be JSON.*\{\"user\": 7\}") as raised:
        run_command("turnkit_cancel", run.id, principal=principal)
    assert len(str(raised.value)) < 400
    assert RECORDED == [] and Turn.objects.get(pk=run.id).status == "pending"
    run_command("turnkit_cancel", run.id, principal='{"user": 7}')
    run_command("turnkit_cancel", run.id, principal={"user": 7})  # call_command's keyword
    assert RECORDED == [{"user": 7}] * 2 and Turn.objects.get(pk=run.id).status == "cancelled"


RECORDED: list[object] = []


def recording_policy(action, *, principal, **resources):
    RECORDED.append(principal)
    return True
