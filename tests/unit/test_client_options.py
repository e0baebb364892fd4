"""Provider clients refuse unusable options when built, naming the option and what to pass.

Without this, a typo such as ``timeout="60"`` or ``max_tokens_field="max_token"`` was accepted
and failed, or was sent to the provider as an unknown field, only at the first request.
"""

from __future__ import annotations

from typing import Any

import pytest

from turnkit_django.clients import AnthropicClient, OpenAIClient, OpenAIEvaluator
from turnkit_django.exceptions import ConfigurationError

BAD_COMMON: list[tuple[str, Any]] = [
    ("timeout", 0), ("timeout", "60"), ("timeout", float("nan")), ("timeout", True),
    ("max_retries", -1), ("max_retries", "3"), ("max_retries", 1.5),
    ("base_url", 5), ("model", 7), ("api_key", 12345678),
]


@pytest.mark.parametrize(("name", "value"), [
    *BAD_COMMON, ("max_tokens", -5), ("max_tokens_field", "max_token"), ("backoff", -1),
    ("max_backoff", "30"), ("extra_headers", ["a"]), ("extra_headers", {"X-A": 1}),
    ("strict_output", "yes"), ("image_timeout", 0), ("organization", 3),
])
def test_openai_client_refuses_a_bad_option(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"OpenAIClient\({name}=\.\.\.\)"):
        OpenAIClient(**{name: value})


@pytest.mark.parametrize(("name", "value"), [
    *BAD_COMMON, ("max_tokens", 0), ("default_headers", "x"), ("prompt_caching", None),
])
def test_anthropic_client_refuses_a_bad_option(name: str, value: Any) -> None:
    with pytest.raises(ConfigurationError, match=rf"AnthropicClient\({name}=\.\.\.\)"):
        AnthropicClient(**{name: value})


def test_an_evaluator_built_from_options_checks_them_too() -> None:
    with pytest.raises(ConfigurationError, match="timeout"):
        OpenAIEvaluator(timeout=-3)


def test_a_bad_key_is_never_shown() -> None:
    with pytest.raises(ConfigurationError) as info:
        OpenAIClient(api_key=["sk-proj-SECRET-value"])  # type: ignore[arg-type]
    assert "SECRET" not in str(info.value)


def test_good_options_are_kept() -> None:
    client = OpenAIClient("gpt-5.4-mini", timeout=5, max_retries=0, max_tokens=100,
                          extra_headers={"X-Title": "t"}, backoff=0, strict_output=True)
    assert (client.timeout, client.max_retries, client.max_tokens) == (5, 0, 100)
    assert AnthropicClient(timeout=1.5, max_retries=0, default_headers=None).timeout == 1.5
