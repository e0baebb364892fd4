"""How many media one paint or view_media call takes is bounded: a list of any length was read
item by item (each up to ``max_bytes``) into memory, and a model's ``reference_images`` each
resolved and read, before anything refused them."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.unit.test_entry_point_audit import rows
from turnkit_django import Agent, ConfigurationError, ToolContext, ViewMediaTool
from turnkit_django.api.media import MAX_MEDIA_ITEMS, to_media_list
from turnkit_django.exceptions import MediaError
from turnkit_django.specialists import painter
from turnkit_django.testing import PNG, FunctionMediaClient, ScriptedClient, call, reply
from turnkit_django.tools import PaintImage

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants", "media_root")]
TOO_MANY = [(PNG, "image/png")] * (MAX_MEDIA_ITEMS + 1)


def test_the_limit_is_documented() -> None:
    assert MAX_MEDIA_ITEMS == 16
    page = (Path(__file__).resolve().parents[2] / "docs/media.md").read_text()
    assert "MAX_MEDIA_ITEMS" in page and "16" in page


def test_view_media_and_paint_refuse_too_many_media_before_reading_any() -> None:
    read: list[int] = []

    class Counted:  # a file-like object: reading it is what the limit must prevent
        def read(self, size: int = -1) -> bytes:
            read.append(1)
            return PNG

    images = FunctionMediaClient()
    run = Agent("looker", client=images).prepare("go")
    before = rows()
    with pytest.raises(MediaError, match=f"at most {MAX_MEDIA_ITEMS} media.*got 17"):
        run.turn.view_media([Counted()] * 17, objective="what")
    with pytest.raises(MediaError, match=f"at most {MAX_MEDIA_ITEMS} input images.*got 17"):
        run.turn.paint("a teapot", input_images=[Counted()] * 17)
    with pytest.raises(MediaError, match="at most"):
        to_media_list(TOO_MANY)
    assert read == [] and images.requests == [] and rows() == before
    assert run.refresh().status == "pending"
    assert len(to_media_list(TOO_MANY[:MAX_MEDIA_ITEMS])) == MAX_MEDIA_ITEMS


def test_a_model_asking_a_tool_to_look_at_too_many_media_reads_a_tool_error(
        registered: Any) -> None:
    images = FunctionMediaClient()

    class LookAtAll(ViewMediaTool):
        """Look at every photo."""

        client = images

        def media(self, ctx: ToolContext, args: Any) -> Any:
            return TOO_MANY

    agent = registered(Agent("looker", tools=[LookAtAll()], client=ScriptedClient([
        call("look_at_all", url="https://x.example/a.png", objective="what"), reply("ok")])))
    run = agent.run("Go")
    [execution] = run.tool_executions()
    assert execution.status == "failed" and f"at most {MAX_MEDIA_ITEMS}" in str(execution.error)
    assert images.requests == [] and run.status == "completed"


def test_the_painter_takes_at_most_the_limit_of_reference_images_from_the_model(
        registered: Any) -> None:
    asked: list[Any] = []
    images = FunctionMediaClient()
    client = ScriptedClient([call("paint_image", prompt="All of them",
                                  reference_images=[f"img_{n}" for n in range(1_000)]),
                             reply("too many")])
    agent = registered(painter(model="claude-sonnet-5-5", image_model="gpt-image-1",
                               gate=lambda **request: asked.append(request) or True,
                               image_client=images, client=client))
    run = agent.run("Draw")
    [execution] = run.tool_executions()
    assert execution.status == "failed" and asked == [] and images.requests == []
    assert f"at most {MAX_MEDIA_ITEMS}" in str(execution.error)
    assert "img_999" not in str(execution.error)
    [spec] = [t for t in client.requests[0].tools if t.name == "paint_image"]
    assert spec.parameters["properties"]["reference_images"]["maxItems"] == MAX_MEDIA_ITEMS


def test_a_reference_cap_above_the_limit_is_a_configuration_error() -> None:
    with pytest.raises(ConfigurationError, match=f"at most {MAX_MEDIA_ITEMS}"):
        PaintImage(gate=lambda **request: True, model="gpt-image-1",
                   max_reference_images=MAX_MEDIA_ITEMS + 1)
    assert PaintImage(gate=lambda **request: True, model="gpt-image-1",
                      max_reference_images=MAX_MEDIA_ITEMS).max_reference_images == 16
