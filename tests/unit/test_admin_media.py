"""Images and analyses in the operations console, ``turnkit_inspect`` and text transcripts.

An image message shows a thumbnail (the provider's URL, else the storage's) or its storage
reference; an analysis its objective, text, data and the media it looked at. Never bytes.
"""

from __future__ import annotations

import base64
import json
import re
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.storage import FileSystemStorage, storages
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from turnkit_django import Agent, tool
from turnkit_django.clients.media import GeneratedImage, ImageResult
from turnkit_django.clients.protocol import Usage
from turnkit_django.console.transcript_text import render
from turnkit_django.models import Message, ToolExecution
from turnkit_django.testing import PNG, FunctionClient, FunctionMediaClient, call, reply

pytestmark = pytest.mark.django_db

SIGNED = "https://cdn.example.com/banner.png?sig=SECRET-SIGNATURE"


class NoURLStorage(FileSystemStorage):
    """A storage that cannot give URLs (like a private bucket without signing)."""

    def url(self, name: str | None) -> str:
        raise NotImplementedError


@pytest.fixture(autouse=True)
def private_storage(settings: Any, tmp_path: Path, media_root: Path) -> None:
    """A second storage alias, ``private``, that has no URLs."""
    settings.STORAGES = {**settings.STORAGES, "private": {
        "BACKEND": f"{__name__}.NoURLStorage", "OPTIONS": {"location": str(tmp_path / "p")}}}
    storages._storages.clear()


@pytest.fixture
def staff() -> Client:
    client = Client()
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    return client


def transcript_of(client: Client, turn_id: str) -> str:
    response = client.get(reverse("admin:turnkit_turn_change", args=[turn_id]))
    assert response.status_code == 200
    body = response.content.decode()
    return body[body.index('id="tk-transcript"'):body.index('id="tk-tree"')]


def photo_run(registered: Any) -> Any:
    images = FunctionMediaClient()

    @tool
    def inspect_and_draw(ctx: Any) -> str:
        """Look at the customer's photo, then draw a replacement."""
        ctx.turn.view_media((PNG, "image/png"), objective="Is the spout chipped?",
                            output_schema={"type": "object"}, client=images)
        ctx.turn.paint("A blue teapot", client=images, model="gpt-image-1", size="1024x1024")
        return "done"

    agent = registered(Agent("console_media", tools=[inspect_and_draw], client=FunctionClient(
        lambda r: call("inspect_and_draw", id="call_1") if r.last_message_is_user()
        else reply("Here it is."))))
    run = agent.run("My teapot broke")
    assert run.status == "completed", run.error
    return run


def test_an_image_shows_a_thumbnail_with_its_facts_and_an_analysis_its_findings(
        registered: Any, staff: Client) -> None:
    run = photo_run(registered)
    image = Message.objects.get(turn_id=run.id, kind="image")
    name = image.content[0]["name"]
    execution = ToolExecution.objects.get(turn_id=run.id)

    page = transcript_of(staff, run.id)

    thumbnail = (f'<img src="/media/{name}" alt="A blue teapot" width="160" loading="lazy" '
                 'referrerpolicy="no-referrer">')
    assert thumbnail in page
    assert image.content[0]["id"] in page and "image/png" in page
    assert f"<code>default</code>: <code>{name}</code>" in page
    assert "provider URLs may expire" not in page, "a storage URL does not expire"
    assert "gpt-image-1" in page and "1024x1024" in page and "272 output" in page
    assert image.metadata["idempotency_key"] in page
    assert reverse("admin:turnkit_toolexecution_change", args=[execution.pk]) in page
    # The analysis: objective, text, structured data, and a row per medium (short digest).
    analysis = Message.objects.get(turn_id=run.id, kind="media_analysis")
    medium = analysis.content[0]["media"][0]
    assert "<b>Is the spout chipped?</b>" in page
    assert "Looked at image/png for: Is the spout chipped?" in page
    assert "structured result" in page and "<pre>{}</pre>" in page
    assert f"<code>{medium['sha256'][:12]}</code>" in page and "69\xa0bytes" in page
    assert base64.b64encode(PNG).decode()[:40] not in page, "never the bytes"


def test_an_image_without_a_url_shows_its_storage_reference(
        registered: Any, staff: Client, settings: Any) -> None:
    settings.TURNKIT = {**getattr(settings, "TURNKIT", {}), "MEDIA_STORAGE": "private"}
    run = registered(Agent("console_private", client=FunctionClient(lambda r: reply("x"))))
    prepared = run.prepare("Draw")
    result = prepared.turn.paint("A teapot", client=FunctionMediaClient())

    page = transcript_of(staff, prepared.id)

    assert "<img" not in page and "no URL to show" in page
    assert f"<code>private</code>: <code>{result.images[0].name}</code>" in page


def test_a_provider_url_is_the_thumbnail_and_the_json_transcript_leaves_its_signature_out(
        registered: Any, staff: Client) -> None:
    agent = registered(Agent("console_url", client=FunctionClient(lambda r: reply("x"))))
    prepared = agent.prepare("Draw")
    prepared.turn.paint("A banner", client=FunctionMediaClient(paint=lambda r: ImageResult(
        images=(GeneratedImage(url=SIGNED, revised_prompt="A wide banner"),),
        model="dall-e-3", usage=Usage())))

    page = transcript_of(staff, prepared.id)
    assert '<img src="https://cdn.example.com/banner.png?sig=SECRET-SIGNATURE"' in page
    assert "revised by the provider: A wide banner" in page and "(provider URLs may expire)" in page

    out = StringIO()
    call_command("turnkit_inspect", prepared.id, "--json", stdout=out)
    messages = json.loads(out.getvalue())["transcript"]["messages"]
    assert "SECRET-SIGNATURE" not in json.dumps(messages)  # (the output text is the URL)
    [item] = [p for m in messages if m["kind"] == "image" for p in m["parts"]]
    assert item["type"] == "image"
    assert item["value"]["url"] == "https://cdn.example.com/banner.png"
    assert item["value"]["revised_prompt"] == "A wide banner"


def test_text_transcripts_describe_images_and_analyses(registered: Any) -> None:
    run = photo_run(registered)
    image_id = Message.objects.get(turn_id=run.id, kind="image").content[0]["id"]
    text = render(run)
    assert f"▣ image {image_id} (image/png, stored): A blue teapot" in text
    assert "◎ analysis of image/png: Looked at image/png for: Is the spout chipped?" in text
    assert "1 model calls" not in text and "2 model calls" in text  # media calls are not loop steps


@pytest.mark.parametrize("url", ["javascript:alert(document.cookie)", "java\tscript:alert(1)",
                                 " javascript:alert(1)", "data:text/html,<script>x</script>"])
def test_an_image_url_that_is_not_http_is_never_a_link_in_the_console(
        registered: Any, staff: Client, url: str) -> None:
    agent = registered(Agent("console_js", client=FunctionClient(lambda r: reply("x"))))
    prepared = agent.prepare("Draw")
    prepared.turn.paint("A banner", client=FunctionMediaClient(paint=lambda r: ImageResult(
        images=(GeneratedImage(url="https://cdn.example.com/b.png"),), model="dall-e-3")))
    image = Message.objects.get(turn_id=prepared.id, kind="image")
    # A row recorded before provider URLs were checked (or by a custom client's own writes).
    Message.objects.filter(pk=image.pk).update(content=[{**image.content[0], "url": url}])

    page = transcript_of(staff, prepared.id)
    assert image.content[0]["id"] in page and "no URL to show" in page
    links = re.findall(r'(?:href|src)="([^"]*)"', page)
    assert all(link.startswith(("/", "https://", "http://", "#", "?"))
                         for link in links), links
