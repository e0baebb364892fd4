"""ImageTool and ViewMediaTool: class attributes and hooks reach the turn's media operations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import storages
from django.core.files.uploadedfile import SimpleUploadedFile
from pydantic import BaseModel

from tests.testapp.models import Upload
from turnkit_django import Agent, ImageTool, ToolContext, ViewMediaTool, tool
from turnkit_django.clients.media import GeneratedImage, ImageResult, MediaAnalysis
from turnkit_django.models import Message
from turnkit_django.testing import (
    PNG,
    FunctionClient,
    FunctionMediaClient,
    ScriptedClient,
    call,
    reply,
)
from turnkit_django.tools import PaintImage

pytestmark = pytest.mark.django_db
MEDIA = FunctionMediaClient()


@pytest.fixture(autouse=True)
def media_root(settings: Any, tmp_path: Path) -> Path:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    storages._storages.clear()
    MEDIA.requests.clear()
    yield tmp_path / "media"
    storages._storages.clear()


class Banner(ImageTool):
    """Draw a banner for the campaign."""

    model = "gpt-image-1"
    size = "1536x1024"
    params = {"quality": "high"}
    client = MEDIA

    def prompt(self, ctx: ToolContext, args: Any) -> str:
        return f"A banner: {args.prompt}. Brand colours only."

    def metadata(self, ctx: ToolContext, args: Any) -> dict[str, Any]:
        return {"campaign": "winter"}


class InspectUpload(ViewMediaTool):
    """Look at a photo the customer uploaded."""

    class Args(BaseModel):
        upload_id: int

    objective_text = "Is the item damaged?"
    client = MEDIA
    output_schema = {"type": "object"}

    def media(self, ctx: ToolContext, args: Any) -> Any:
        return Upload.objects.get(pk=args.upload_id).file


def run_with(registered: Any, tools: list[Any], *script: Any) -> Any:
    agent = registered(Agent("designer", tools=tools, client=ScriptedClient(list(script))))
    return agent.run("Go")


def test_an_image_tool_paints_with_its_attributes_and_hooks(registered: Any) -> None:
    run = run_with(registered, [Banner()], call("banner", prompt="snow"), reply("done"))
    [request] = MEDIA.requests
    assert (request.model, request.size, request.params) == (
        "gpt-image-1", "1536x1024", {"quality": "high"})
    assert request.prompt == "A banner: snow. Brand colours only."
    image = Message.objects.get(kind="image")
    assert image.metadata["metadata"] == {"campaign": "winter"}
    result = Message.objects.get(role="tool").content[0]["content"]
    assert result["image_message_id"] == image.pk and set(result) == {
        "conversation_id", "image_message_id", "images", "model", "size"}
    assert run.status == "completed"


def test_a_view_media_tool_analyses_a_filefield_upload(registered: Any) -> None:
    upload = Upload.objects.create(file=SimpleUploadedFile("broken.png", PNG))
    run_with(registered, [InspectUpload()], call("inspect_upload", upload_id=upload.pk),
             reply("done"))
    [request] = MEDIA.requests
    assert request.media[0].data == PNG and request.media[0].name == "broken.png"
    assert request.objective == "Is the item damaged?"
    result = Message.objects.get(role="tool").content[0]["content"]
    assert result["text"] == "Looked at broken.png for: Is the item damaged?"
    assert result["data"] == {} and result["media"] == [
        {"name": "broken.png", "mime_type": "image/png", "size": len(PNG)}]
    assert InspectUpload.read_only and InspectUpload().replay_safe


def test_the_default_view_media_tool_takes_only_https_urls_from_the_model(
        registered: Any) -> None:
    class Look(ViewMediaTool):
        """Look at an image on the web."""

        client = MEDIA

    run_with(registered, [Look()], call("look", url="/etc/passwd", objective="Read it"),
             call("look", url="https://cdn.example.com:99999/p.png", objective="What is it?"),
             call("look", url="https://cdn.example.com/p.png", objective="What is it?"),
             reply("done"))
    first, bad_port, third = (m.content[0] for m in Message.objects.filter(role="tool")
                              .order_by("sequence"))
    assert first["is_error"] and "https URL" in first["content"]["message"]
    assert bad_port["is_error"] and bad_port["content"]["error"] == "ToolError"
    assert "port" in bad_port["content"]["message"], "the model reads why, before any call"
    assert not third["is_error"]
    [request] = MEDIA.requests
    assert request.media[0].url == "https://cdn.example.com/p.png"


def test_a_function_tool_uses_the_turn_as_the_api_example_shows(registered: Any) -> None:
    upload = Upload.objects.create(file=SimpleUploadedFile("photo.png", PNG))
    vision = FunctionMediaClient(view_media=lambda r: MediaAnalysis(
        text="Chipped spout.", data={"damaged": True}, model="claude-sonnet-5-5"))

    class Damage(BaseModel):
        damaged: bool

    @tool
    def inspect_photo(ctx: ToolContext, upload_id: int) -> dict:
        """Check the customer's photo."""
        analysis = ctx.turn.view_media(Upload.objects.get(pk=upload_id).file,
                                       objective="Is the item damaged?", output_schema=Damage,
                                       client=vision)
        return analysis.data

    run_with(registered, [inspect_photo], call("inspect_photo", upload_id=upload.pk),
             reply("done"))
    assert Message.objects.get(role="tool").content[0]["content"] == {"damaged": True}
    assert vision.requests[0].output_schema == Damage.model_json_schema()


def test_a_reference_to_an_image_whose_url_is_not_http_is_never_read_as_a_server_file(
        registered: Any, tmp_path: Path) -> None:
    secret = tmp_path / "secret.png"
    secret.write_bytes(PNG + b"SERVER-SECRET")
    painter = FunctionMediaClient()
    agent = registered(Agent("ref_painter", tools=[PaintImage(
        gate=lambda **request: True, model="gpt-image-1", client=painter)],
        client=FunctionClient(lambda r: call(
            "paint_image", prompt="Bluer", reference_images=[
                Message.objects.get(kind="image").content[0]["id"]])
            if r.last_message_is_user() else reply("done"))))
    conv = agent.conversation()
    conv.prepare_turn().paint("A teapot", client=FunctionMediaClient(paint=lambda r: ImageResult(
        images=(GeneratedImage(url="https://img.example/1.png"),), model="gpt-image-1")))
    image = Message.objects.get(kind="image")
    # A row recorded before provider URLs were checked, holding a path where its URL goes.
    Message.objects.filter(pk=image.pk).update(
        content=[{**image.content[0], "url": str(secret)}])
    run = conv.ask("Again")
    result = Message.objects.get(turn_id=run.id, role="tool").content[0]
    assert result["is_error"] and "http" in result["content"]["message"]
    assert painter.requests == [], "nothing read from the server's disk was sent anywhere"
