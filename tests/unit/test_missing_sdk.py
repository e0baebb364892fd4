"""A built-in client whose provider SDK is not installed: it imports on first use, so the dotted
path imported, `check --deploy` passed and every run failed at its first model call. The deploy
check now reports it (turnkit.E009)."""

from __future__ import annotations

import sys

from django.core.checks import run_checks
from django.test import override_settings

from turnkit_django.checks import TAG
from turnkit_django.clients.anthropic import AnthropicClient


def _messages(check_id: str, *, deploy: bool = False) -> list[str]:
    return [f"{m.msg} {m.hint}" for m in run_checks(tags=[TAG], include_deployment_checks=deploy)
            if m.id == check_id]


def test_a_client_whose_sdk_is_not_installed_fails_the_deploy_check(monkeypatch):
    """ANTHROPIC_API_KEY set, `anthropic` not installed: check --deploy used to pass, then every
    run failed at its first model call."""
    monkeypatch.setitem(sys.modules, "anthropic", None)  # `import anthropic` raises ImportError
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with override_settings(TURNKIT={"CLIENT": AnthropicClient()}):
        (text,) = _messages("turnkit.E009", deploy=True)
        assert not _messages("turnkit.W003", deploy=True)
    assert "anthropic SDK" in text and "pip install 'turnkit-django[anthropic]'" in text


def test_a_client_whose_sdk_is_installed_passes_the_deploy_check(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with override_settings(TURNKIT={"CLIENT": AnthropicClient()}):
        assert not _messages("turnkit.E009", deploy=True)


