"""Unknown option keys of mixed types get the "unknown option" error, not a TypeError."""

from __future__ import annotations

import pytest

from turnkit_django.agents.definition import check_thinking
from turnkit_django.clients import AnthropicClient
from turnkit_django.clients.media import MediaRequest, analysis_request
from turnkit_django.exceptions import ConfigurationError, ModelError


def test_thinking_with_mixed_keys_names_the_unknown_options() -> None:
    with pytest.raises(ConfigurationError, match="unknown thinking options"):
        check_thinking({1: 1, "x": 2}, "agent 'a'")


def test_anthropic_thinking_with_mixed_keys_names_the_unknown_options() -> None:
    with pytest.raises(ModelError, match="unknown thinking options"):
        AnthropicClient._thinking({1: 1, "x": 2})  # type: ignore[dict-item]


def test_view_media_params_with_mixed_keys_name_the_unknown_params() -> None:
    request = MediaRequest(media=(), objective="look", params={1: 1, "x": 2})  # type: ignore[dict-item]
    with pytest.raises(ConfigurationError, match="unknown view_media params"):
        analysis_request(request, ())
