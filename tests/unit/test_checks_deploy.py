"""Deploy-tagged system checks."""

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from turnkit_django import Agent, register
from turnkit_django.agents.registry import unregister
from turnkit_django.clients.anthropic import AnthropicClient
from turnkit_django.testing import FunctionClient, ScriptedClient, reply


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


def _w010(about, **kwargs):
    return [m for m in run_checks(include_deployment_checks=True, **kwargs)
            if m.id == "turnkit.W010" and about in m.msg]


@pytest.mark.parametrize("client", [
    "turnkit_django.testing.ScriptedClient", FunctionClient(lambda request: reply("hi"))])
def test_a_test_client_as_the_default_client_is_a_deploy_warning(monkeypatch, client):
    """``check --deploy`` was silent when TURNKIT["CLIENT"] was one of the test doubles: every
    turn of the deployed site would answer with scripted text and no model was ever called."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")
    with override_settings(TURNKIT={"CLIENT": client}):
        (message,) = _w010("TURNKIT['CLIENT']")
        name = client.rsplit(".", 1)[1] if isinstance(client, str) else type(client).__name__
        assert "TURNKIT['CLIENT']" in message.msg and name in message.msg
        assert not [m for m in run_checks() if m.id == "turnkit.W010"]  # deploy only
    with override_settings(TURNKIT={"CLIENT": AnthropicClient()}):
        assert not _w010("TURNKIT['CLIENT']")


def test_a_registered_agent_with_a_test_client_is_a_deploy_warning(monkeypatch):
    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-ant-test")

    class ProjectDouble(ScriptedClient):  # a subclass defined in the project is one too
        pass

    register(Agent("scripted_in_prod", client=ProjectDouble(["hi"])))
    try:
        with override_settings(TURNKIT={"CLIENT": AnthropicClient()}):
            (message,) = _w010("scripted_in_prod")
        assert "agent 'scripted_in_prod'" in message.msg and "ProjectDouble" in message.msg
    finally:
        unregister("scripted_in_prod")
