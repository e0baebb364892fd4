"""Bad options to the specialist factories raise ``ConfigurationError`` naming the option, never
a bare ``TypeError`` / ``KeyError`` / ``AttributeError`` from inside the factory."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from turnkit_django import tool
from turnkit_django.exceptions import ConfigurationError
from turnkit_django.specialists import librarian, oracle, painter

MODEL = "claude-sonnet-5-5"


@tool(read_only=True)
def search(query: str) -> list[str]:
    """Search the docs."""
    return [query]


@pytest.mark.parametrize("tools", [search, None, "search", [search, 5]])
def test_oracle_tools_must_be_a_list_of_tools(tools: Any) -> None:
    with pytest.raises(ConfigurationError, match="oracle 'oracle': tools must be a list"):
        oracle(model=MODEL, tools=tools)


@pytest.mark.parametrize(("options", "message"), [
    ({"root": 5}, "root must be a directory path"),
    ({"max_bytes": "100"}, "max_bytes must be a whole number above 0"),
])
def test_oracle_file_options_are_checked(tmp_path: Path, options: dict[str, Any],
                                         message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        oracle(model=MODEL, **{"root": tmp_path, **options})


def test_librarian_instructions_may_hold_braces_and_must_be_text() -> None:
    agent = librarian(model=MODEL, repository="django/django",
                      instructions='Answer as JSON {"answer": ...} about {repository}.')
    assert agent.instructions == 'Answer as JSON {"answer": ...} about django/django.'
    with pytest.raises(ConfigurationError, match="librarian 'librarian': instructions must be"):
        librarian(model=MODEL, repository="django/django", instructions=None)  # type: ignore


@pytest.mark.parametrize(("options", "message"), [
    ({"size": 1024}, "size must be a str"),
    ({"image_provider": 5}, "image_provider must be a str"),
    ({"image_params": [("quality", "high")]}, "image_params must be a dict"),
    ({"resolve_reference": "myapp.resolve"}, "resolve_reference must be a callable"),
    ({"max_reference_images": True}, "max_reference_images must be a whole number from 0 to"),
])
def test_painter_options_are_checked(options: dict[str, Any], message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        painter(model=MODEL, image_model="gpt-image-1", gate=lambda **kw: True, **options)
