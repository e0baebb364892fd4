"""paint() and view_media() refuse unusable options before anything is written: a model that is
no name, params or metadata that are no JSON object (or hold what a database cannot store), a
max_bytes that is no positive int, a provider that is no name, empty media."""

from __future__ import annotations

import pytest

from tests.unit.test_entry_point_audit import rows
from turnkit_django import Agent, ConfigurationError
from turnkit_django.api.media import to_media
from turnkit_django.exceptions import MediaError
from turnkit_django.testing import PNG, FunctionMediaClient

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants", "media_root")]


def media_agent() -> Agent:
    return Agent("painter_probe", client=FunctionMediaClient())


@pytest.mark.parametrize("options", [
    {"model": 5}, {"model": " gpt-image-1"}, {"params": 5}, {"params": "ab"}, {"params": [1]},
    {"params": {"quality": float("nan")}}, {"params": {1: "x"}}, {"max_bytes": -1},
    {"max_bytes": True}, {"max_bytes": "5"}, {"max_bytes": 0}, {"metadata": {"x": float("nan")}},
    {"metadata": {"x": "a\x00"}}, {"metadata": {"x": object()}},
])
def test_paint_refuses_unusable_options_before_anything_is_written(options):
    run = media_agent().prepare("go")
    before = rows()
    with pytest.raises(MediaError):
        run.turn.paint("a teapot", **options)
    assert rows() == before
    assert run.refresh().status == "pending"


@pytest.mark.parametrize("prompt", ["a\x00b", "\ud800"])
def test_paint_refuses_a_prompt_no_database_stores(prompt):
    run = media_agent().prepare("go")
    before = rows()
    with pytest.raises(MediaError, match="prompt"):
        run.turn.paint(prompt)
    assert rows() == before


@pytest.mark.parametrize("provider", [[], {}, 5])
def test_a_provider_that_is_no_name_is_a_configuration_error(provider):
    run = media_agent().prepare("go")
    with pytest.raises(ConfigurationError, match="provider"):
        run.turn.paint("a teapot", provider=provider)
    with pytest.raises(ConfigurationError, match="provider"):
        run.turn.view_media((PNG, "image/png"), objective="what", provider=provider)


@pytest.mark.parametrize("options", [
    {"model": 5}, {"params": 5}, {"max_bytes": -1}, {"objective": "a\x00"},
    {"metadata": {"x": float("inf")}},
])
def test_view_media_refuses_unusable_options_before_anything_is_written(options):
    run = media_agent().prepare("go")
    before = rows()
    options.setdefault("objective", "what")
    with pytest.raises(MediaError):
        run.turn.view_media((PNG, "image/png"), **options)
    assert rows() == before


@pytest.mark.parametrize("media", [(b"", "image/png"), b"", "data:image/png;base64,"])
def test_empty_media_is_refused(media):
    run = media_agent().prepare("go")
    with pytest.raises(MediaError, match="empty"):
        run.turn.view_media(media, objective="what")
    with pytest.raises(MediaError, match="max_bytes"):
        to_media((PNG, "image/png"), max_bytes=0)
