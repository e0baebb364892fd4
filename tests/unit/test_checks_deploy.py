"""Deploy-tagged system checks."""

from django.core.checks import run_checks
from django.test import override_settings

from turnkit_django.clients.anthropic import AnthropicClient


def _ids(**kwargs):
    return {m.id for m in run_checks(include_deployment_checks=True, **kwargs)}


def test_client_without_credentials_is_a_deploy_warning(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with override_settings(TURNKIT={"CLIENT": AnthropicClient()}):
        assert "turnkit.W003" in _ids()
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with override_settings(TURNKIT={"CLIENT": AnthropicClient()}):
        assert "turnkit.W003" not in _ids()


def test_credentials_check_is_deploy_only(monkeypatch):
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    with override_settings(TURNKIT={"CLIENT": AnthropicClient()}):
        assert "turnkit.W003" not in {m.id for m in run_checks()}
