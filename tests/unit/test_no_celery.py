"""`pip install turnkit-django` without the celery extra: `manage.py check` used to pass and
every `submit()` logged a ModuleNotFoundError traceback under "maintenance will retry", which it
never could. Both now say what to install (turnkit.W009)."""

from __future__ import annotations

import pytest
from django.core.checks import run_checks

from tests.dispatch import DISPATCHER
from turnkit_django import Agent
from turnkit_django import checks as turnkit_checks
from turnkit_django.checks import TAG
from turnkit_django.runtime import submission
from turnkit_django.testing import ScriptedClient

pytestmark = pytest.mark.django_db


def _messages(check_id: str, *, deploy: bool = False) -> list[str]:
    return [f"{m.msg} {m.hint}" for m in run_checks(tags=[TAG], include_deployment_checks=deploy)
            if m.id == check_id]


def test_without_celery_the_checks_say_that_submit_cannot_dispatch(monkeypatch, settings):
    monkeypatch.setattr(turnkit_checks, "celery", None)
    (text,) = _messages("turnkit.W009")
    assert "Celery is not installed" in text
    assert "pip install 'turnkit-django[celery]'" in text and "DISPATCHER" in text
    settings.TURNKIT = {**settings.TURNKIT, "DISPATCHER": DISPATCHER}
    assert not _messages("turnkit.W009")


def _no_celery(path: str) -> object:
    raise ModuleNotFoundError("No module named 'celery'", name="celery")


def test_without_celery_submit_logs_what_to_install_not_a_traceback(
        monkeypatch, registered, settings, caplog, django_capture_on_commit_callbacks):
    monkeypatch.setattr(submission, "import_string", _no_celery)
    settings.TURNKIT = {**settings.TURNKIT, "CLIENT": ScriptedClient()}
    agent = registered(Agent("no_celery"))
    with caplog.at_level("WARNING"), django_capture_on_commit_callbacks(execute=True):
        run = agent.submit("a task")
    assert run.refresh().status == "pending"
    (record,) = [r for r in caplog.records if "could not dispatch turn" in r.getMessage()]
    text = record.getMessage()
    assert "Celery is not installed" in text and "pip install 'turnkit-django[celery]'" in text
    assert "DISPATCHER" in text and "turnkit.W009" in text
    assert record.exc_info is None  # the message says it all


