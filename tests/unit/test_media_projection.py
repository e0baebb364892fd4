"""The projection of media messages: later model calls see text, never bytes or metadata.

The last tests go through the real request builder (``runtime.model.build_request``).
"""

from __future__ import annotations

import base64
import json
from pathlib import Path
from typing import Any

import pytest

from turnkit_django import Agent, tool
from turnkit_django.api.media import project_media
from turnkit_django.clients import AnthropicClient, ModelRequest, OpenAIClient
from turnkit_django.messages import (
    ChatMessage,
    ImagePart,
    MediaAnalysisPart,
    TextPart,
    ToolCallPart,
    ToolResultPart,
    dump_parts,
    load_parts,
)
from turnkit_django.models import Message
from turnkit_django.runtime.compaction import summary_request
from turnkit_django.testing import PNG, FunctionClient, FunctionMediaClient, call, reply

SECRETS = ("turnkit/images/turn_1/img_1.png", "sig=SECRET", "0f3a9c", "0.0425", "idem-key")
IMAGE = ImagePart(id="img_1", url="https://cdn.example.com/i.png?sig=SECRET",
                  storage="default", name="turnkit/images/turn_1/img_1.png",
                  prompt="A blue teapot", revised_prompt="A cobalt blue teapot")
ANALYSIS = MediaAnalysisPart(
    text="The spout is chipped.", objective="Is it damaged?", data={"damaged": True},
    media=({"name": "photo.jpg", "mime_type": "image/jpeg", "size": 123_456, "sha256": "0f3a9c",
            "source": "file"},))
HIDDEN = {"cost": "0.0425", "idempotency_key": "idem-key", "usage": {"output_tokens": 1056}}


def media(kind: str, part: object, call_id: str | None = None, sequence: int = 0) -> ChatMessage:
    metadata = dict(HIDDEN, **({"tool_call_id": call_id} if call_id else {}))
    return ChatMessage("assistant", (part,), kind, sequence, metadata)  # type: ignore[arg-type]


def tool_exchange() -> list[ChatMessage]:
    return [
        ChatMessage("user", (TextPart("My teapot broke; make me a blue one."),)),
        ChatMessage("assistant", (ToolCallPart("call_1", "inspect_and_draw", {}),),
                    "tool_call"),
        media("media_analysis", ANALYSIS, "call_1"),
        media("image", IMAGE, "call_1"),
        ChatMessage("tool", (ToolResultPart("call_1", "inspect_and_draw", {"ok": True}),),
                    "tool_result"),
    ]


def test_media_made_by_a_tool_is_folded_into_its_result_as_text() -> None:
    projected = project_media(tool_exchange())

    assert [(m.role, m.kind) for m in projected] == [
        ("user", "text"), ("assistant", "tool_call"), ("tool", "tool_result")]
    [result] = projected[-1].tool_results
    assert result.content == (
        '{"ok": true}\n\n'
        '[Media analysis] of photo.jpg (image/jpeg, 120.6 KB) for the objective '
        '"Is it damaged?":\nThe spout is chipped.\nStructured result: {"damaged": true}\n\n'
        '[Generated image img_1] image/png, from the prompt: "A blue teapot" (the provider '
        'revised it to "A cobalt blue teapot"). The application holds the image; you cannot '
        "see it.")
    rendered = json.dumps([[str(p) for p in m.parts] for m in projected])
    assert not any(secret in rendered for secret in SECRETS)


def test_a_media_message_of_its_own_becomes_an_assistant_description() -> None:
    projected = project_media([ChatMessage("user", (TextPart("Draw a teapot"),)),
                               media("image", IMAGE, sequence=2),
                               ChatMessage("user", (TextPart("Now make it red"),))])
    assert [(m.role, m.kind) for m in projected] == [
        ("user", "text"), ("assistant", "image"), ("user", "text")]
    assert projected[1].text.startswith("[Generated image img_1] image/png")
    assert projected[1].metadata == {} and projected[1].sequence == 2


def test_media_of_a_call_still_running_is_left_out() -> None:
    messages = tool_exchange()[:-1]  # the tool has not returned yet
    assert [m.kind for m in project_media(messages)] == ["text", "tool_call"]


def test_the_projection_is_a_valid_request_for_both_providers() -> None:
    request = ModelRequest(model="m", messages=tuple(project_media(tool_exchange())))
    anthropic = AnthropicClient(api_key="k" * 10).build_request(request)["messages"]
    assert [m["role"] for m in anthropic] == ["user", "assistant", "user"]
    assert anthropic[-1]["content"][0]["type"] == "tool_result"
    openai = OpenAIClient(api_key="k" * 10).build_request(request)["messages"]
    assert [m["role"] for m in openai] == ["user", "assistant", "tool"]
    assert "Generated image img_1" in openai[-1]["content"]


def test_messages_without_media_are_unchanged() -> None:
    messages = [m for m in tool_exchange() if m.kind not in ("image", "media_analysis")]
    assert project_media(messages) == messages


# --------------------------------------------------------------------------- the request builder


def _sent(request: ModelRequest) -> str:
    """Everything a provider would receive of ``request``'s messages."""
    return json.dumps([dump_parts(m.parts) for m in request.messages]) + json.dumps(
        [m.metadata for m in request.messages], default=str)


@pytest.mark.django_db
def test_the_next_model_request_of_a_turn_sees_its_tools_media_as_text_only(
        registered: Any, media_root: Path) -> None:
    images = FunctionMediaClient()

    @tool
    def inspect_and_draw(ctx: Any) -> dict[str, Any]:
        """Look at the photo, then draw a replacement."""
        analysis = ctx.turn.view_media((PNG, "image/png"), objective="Is it damaged?",
                                       client=images)
        image = ctx.turn.paint("A blue teapot", client=images, model="gpt-image-1")
        return {"analysis": analysis.message_id, "image": image.message_id}

    chat = FunctionClient(lambda r: call("inspect_and_draw", id="call_1")
                          if r.last_message_is_user() else reply("Done."))
    run = registered(Agent("projected", tools=[inspect_and_draw], client=chat)).run("Fix it")

    assert run.status == "completed", run.error
    after = chat.requests[1]
    assert [(m.role, m.kind) for m in after.messages] == [
        ("user", "text"), ("assistant", "tool_call"), ("tool", "tool_result")]
    [result] = after.messages[-1].tool_results
    [image] = Message.objects.filter(turn_id=run.id, kind="image")
    [part] = load_parts(image.content)
    assert f"[Media analysis] of unnamed (image/png, {len(PNG)} bytes)" in result.content
    assert f"[Generated image {part.id}] image/png" in result.content
    sent = _sent(after)
    hidden = [part.name, "/media/", image.metadata["idempotency_key"], "sha256",
              base64.b64encode(PNG).decode(), image.metadata["cost"]]
    assert not [secret for secret in hidden if secret and secret in sent]


@pytest.mark.django_db
def test_a_later_turn_sees_a_pending_turns_image_as_an_assistant_description(
        registered: Any, media_root: Path) -> None:
    chat = FunctionClient(lambda r: reply("A red one is on its way."))
    agent = registered(Agent("studio_chat", client=chat))
    conversation = agent.conversation()
    conversation.say("Draw a teapot")
    image = conversation.prepare_turn().paint("A teapot", client=FunctionMediaClient())

    conversation.ask("Now make it red")

    request = chat.requests[-1]
    assert [(m.role, m.kind) for m in request.messages] == [
        ("user", "text"), ("assistant", "image"), ("user", "text")]
    assert request.messages[1].parts == (TextPart(
        f"[Generated image {image.images[0].id}] image/png, from the prompt: \"A teapot\". The "
        "application holds the image; you cannot see it."),)
    assert image.images[0].name not in _sent(request)


def test_a_history_summary_is_asked_about_media_descriptions_only() -> None:
    options = {"tool_output_max_chars": 2000, "context_limit": 100_000}
    request = summary_request(tool_exchange(), options, "m", None)
    text = request.messages[0].text
    assert "[image] [Generated image img_1] image/png" in text
    assert "[media_analysis] [Media analysis] of photo.jpg" in text
    assert not any(secret in text for secret in SECRETS)
