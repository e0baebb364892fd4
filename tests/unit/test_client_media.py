"""paint and view_media at the HTTP boundary: OpenAI's images API and vision, Anthropic's vision.

Requests are checked byte for byte (JSON bodies, multipart parts, headers); the answers are the
providers' documented shapes (fixtures/openai_media.json, fixtures/anthropic_media.json).
"""

from __future__ import annotations

import email
import email.policy
import logging
from collections.abc import Iterator
from decimal import Decimal
from typing import Any

import httpx
import pytest

from tests.unit.fixtures.wire import (
    Wire,
    allow_network,
    anthropic_httpx,
    assert_secret_absent,
    payloads,
)
from turnkit_django.api.media import to_media
from turnkit_django.clients import AnthropicClient, OpenAIClient, Usage
from turnkit_django.clients.cost import compute_cost
from turnkit_django.clients.media import (
    VIEW_INSTRUCTIONS,
    GeneratedImage,
    ImageRequest,
    ImageResult,
    MediaAnalysis,
    MediaRequest,
    supports,
)
from turnkit_django.exceptions import ConfigurationError, MediaError, ModelAccessError, ModelError
from turnkit_django.testing import PNG

OPENAI = payloads("openai_media")
A = payloads("anthropic_media")
KEY = "sk-proj-unit-test-media-key"
ANTHROPIC_KEY = "sk-ant-api03-unit-test-media-key"
PDF = b"%PDF-1.7\n1 0 obj << /Type /Catalog >> endobj\ntrailer << /Root 1 0 R >>\n%%EOF\n"
PHOTO = to_media(PNG, name="photo.png")
SCHEMA = {"type": "object", "properties": {"damaged": {"type": "boolean"},
                                           "part": {"type": "string"}},
          "required": ["damaged", "part"], "additionalProperties": False}


@pytest.fixture(autouse=True)
def _environment(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    for name in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "ANTHROPIC_API_KEY", "ANTHROPIC_BASE_URL"):
        monkeypatch.delenv(name, raising=False)
    with allow_network():
        yield


def openai(*script: Any, **options: Any) -> tuple[OpenAIClient, Wire, list[float]]:
    wire = Wire(httpx, *script)
    sleeps: list[float] = []
    client = OpenAIClient(api_key=KEY, transport=httpx.MockTransport(wire.handler),
                          sleep=sleeps.append, **options)
    return client, wire, sleeps


def anthropic(*script: Any) -> tuple[AnthropicClient, Wire]:
    wire = Wire(anthropic_httpx(), *script)
    return AnthropicClient(api_key=ANTHROPIC_KEY, http_client=wire.client(), max_retries=0), wire


def multipart(request: httpx.Request) -> list[tuple[str, str | None, str, bytes]]:
    """(field name, file name, content type, bytes) of each part of a multipart request."""
    raw = b"Content-Type: " + request.headers["content-type"].encode() + b"\r\n\r\n"
    message = email.message_from_bytes(raw + request.content, policy=email.policy.HTTP)
    return [(part.get_param("name", header="content-disposition"), part.get_filename(),
             part.get_content_type(), part.get_payload(decode=True))
            for part in message.iter_parts()]


def test_capabilities_are_declared_flags() -> None:
    assert supports(OpenAIClient(), "paint") and supports(OpenAIClient(), "view_media")
    assert supports(AnthropicClient(), "view_media") and not supports(AnthropicClient(), "paint")


# --------------------------------------------------------------------------- OpenAI paint


def test_generation_request_and_answer_of_a_gpt_image_model() -> None:
    client, wire, _ = openai((200, OPENAI["generation_gpt_image"]))
    result = client.paint(ImageRequest("A teapot on a shelf", size="1024x1024",
                                       params={"quality": "medium"},
                                       idempotency_key="turnkit:tex_1:paint:1"))

    [sent] = wire.requests
    assert (sent.method, str(sent.url)) == ("POST", "https://api.openai.com/v1/images/generations")
    assert sent.headers["authorization"] == f"Bearer {KEY}"
    assert sent.headers["idempotency-key"] == "turnkit:tex_1:paint:1"
    assert wire.bodies == [{"model": "gpt-image-1", "prompt": "A teapot on a shelf",
                            "size": "1024x1024", "quality": "medium"}]
    assert result == ImageResult(images=(GeneratedImage(mime_type="image/png", data=PNG),),
                                 model="gpt-image-1", usage=Usage(input_tokens=50,
                                                                  output_tokens=1056),
                                 provider="openai", size="1024x1024")
    # 50 text tokens at 5 USD and 1056 image tokens at 40 USD per million.
    assert compute_cost(result.model, result.usage) == Decimal("0.04249000")


def test_dall_e_answers_with_a_url_and_a_revised_prompt_and_no_usage() -> None:
    client, _, _ = openai((200, OPENAI["generation_dalle"]))
    result = client.paint(ImageRequest("A teapot", model="dall-e-3"))
    [image] = result.images
    assert image.data is None and image.url.startswith("https://oaidalleapiprodscus")
    assert image.revised_prompt.startswith("A white porcelain teapot")
    assert result.usage == Usage() and compute_cost("dall-e-3", result.usage) is None


def test_an_edit_uploads_the_images_and_the_mask_as_multipart_parts() -> None:
    client, wire, _ = openai((200, OPENAI["edit_gpt_image"]))
    mask = to_media(PNG, name="mask.png")
    result = client.paint(ImageRequest(
        "Make the teapot blue", size="1024x1536", input_images=(PHOTO, to_media(PNG)),
        mask=mask, params={"input_fidelity": "high", "n": 1}, idempotency_key="k-1"))

    [sent] = wire.requests
    assert str(sent.url) == "https://api.openai.com/v1/images/edits"
    assert sent.headers["content-type"].startswith("multipart/form-data; boundary=")
    assert sent.headers["idempotency-key"] == "k-1"
    assert multipart(sent) == [
        ("model", None, "text/plain", b"gpt-image-1"),
        ("prompt", None, "text/plain", b"Make the teapot blue"),
        ("size", None, "text/plain", b"1024x1536"),
        ("input_fidelity", None, "text/plain", b"high"),
        ("n", None, "text/plain", b"1"),
        ("image[]", "photo.png", "image/png", PNG),
        ("image[]", "image-2.png", "image/png", PNG),
        ("mask", "mask.png", "image/png", PNG),
    ]
    assert result.images[0].mime_type == "image/webp"
    assert result.usage == Usage(input_tokens=57, output_tokens=1584, image_input_tokens=1323)
    # 57 text x 5 + 1323 image x 10 + 1584 output x 40, per million.
    assert compute_cost("gpt-image-1", result.usage) == Decimal("0.07687500")


def test_one_input_image_is_the_image_part() -> None:
    client, wire, _ = openai((200, OPENAI["edit_gpt_image"]))
    client.paint(ImageRequest("Brighter", input_images=(PHOTO,)))
    names = [name for name, *_ in multipart(wire.requests[0])]
    assert names == ["model", "prompt", "image"]


def test_an_edit_refuses_a_url_reference_before_sending_anything() -> None:
    client, wire, _ = openai()
    url = to_media("https://cdn.example.com/photo.png")
    with pytest.raises(MediaError, match=r"upload the image: 'photo\.png' is a URL"):
        client.paint(ImageRequest("Brighter", input_images=(url,)))
    assert wire.requests == []


def test_a_moderation_refusal_is_a_model_error_that_is_not_retried() -> None:
    client, wire, _ = openai((400, OPENAI["moderation_blocked"]))
    with pytest.raises(ModelError, match="rejected by the safety system") as info:
        client.paint(ImageRequest("Something forbidden"))
    assert info.value.status == 400 and not info.value.retryable
    assert "moderation_blocked" in str(info.value) and len(wire.requests) == 1


def test_a_read_timeout_is_not_retried_because_the_image_may_have_been_paid_for() -> None:
    client, wire, sleeps = openai("timeout", (200, OPENAI["generation_gpt_image"]), max_retries=3)
    with pytest.raises(ModelError, match="timed out"):
        client.paint(ImageRequest("A teapot", idempotency_key="k-2"))
    assert len(wire.requests) == 1 and sleeps == []


def test_failures_before_the_provider_took_the_request_are_retried_with_the_same_key() -> None:
    client, wire, sleeps = openai("connect", (429, {"error": {"message": "slow down"}}),
                                  (503, {"error": {"message": "busy"}}),
                                  (200, OPENAI["generation_gpt_image"]), max_retries=3)
    result = client.paint(ImageRequest("A teapot", idempotency_key="k-3"))
    assert result.images[0].data == PNG
    assert [r.headers["idempotency-key"] for r in wire.requests] == ["k-3"] * 4
    assert len(sleeps) == 3


def test_a_rejected_key_never_reaches_errors_or_logs(caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.DEBUG)
    client, _, _ = openai((401, OPENAI["invalid_key"]))
    with pytest.raises(ModelAccessError, match="HTTP 401") as info:
        client.paint(ImageRequest("A teapot"))
    assert "Incorrect API key" not in str(info.value)
    assert_secret_absent(KEY, info.value, caplog.records)


def test_an_answer_without_images_is_a_model_error() -> None:
    client, _, _ = openai((200, {"created": 1, "data": []}))
    with pytest.raises(ModelError, match="holds no images"):
        client.paint(ImageRequest("A teapot"))


# --------------------------------------------------------------------------- OpenAI vision


def test_openai_vision_sends_image_and_file_parts_and_parses_structured_data() -> None:
    client, wire, _ = openai((200, OPENAI["vision"]))
    invoice = to_media(PDF, name="invoice.pdf")
    analysis = client.view_media(MediaRequest(
        (PHOTO, invoice, to_media("https://cdn.example.com/a/b.jpg")), "Is it damaged?",
        model="gpt-5.4-mini", output_schema=SCHEMA))

    [body] = wire.bodies
    assert str(wire.requests[0].url) == "https://api.openai.com/v1/chat/completions"
    assert body["messages"] == [
        {"role": "system", "content": VIEW_INSTRUCTIONS},
        {"role": "user", "content": [
            {"type": "text", "text": "Objective: Is it damaged?"},
            {"type": "image_url", "image_url": {"url": PHOTO.data_url()}},
            {"type": "file", "file": {"filename": "invoice.pdf",
                                      "file_data": invoice.data_url()}},
            {"type": "image_url", "image_url": {"url": "https://cdn.example.com/a/b.jpg"}},
        ]},
    ]
    assert body["response_format"]["json_schema"]["schema"] == SCHEMA
    assert PHOTO.data_url().startswith("data:image/png;base64,iVBOR")
    assert analysis == MediaAnalysis(
        text='{"damaged":true,"part":"spout"}', data={"damaged": True, "part": "spout"},
        model="gpt-5.4-mini-2026-03-17", usage=Usage(input_tokens=1210, output_tokens=14),
        provider="openai")


def test_openai_vision_refuses_a_pdf_url_and_unknown_types() -> None:
    client, wire, _ = openai()
    with pytest.raises(MediaError, match="PDFs as bytes, not URLs"):
        client.view_media(MediaRequest((to_media("https://cdn.example.com/x.pdf"),), "Read"))
    with pytest.raises(MediaError, match="not 'audio/mpeg'"):
        client.view_media(MediaRequest((to_media(b"ID3", mime_type="audio/mpeg"),), "Listen"))
    with pytest.raises(ConfigurationError, match="unknown view_media params"):
        client.view_media(MediaRequest((PHOTO,), "Look", params={"temperature": 0}))
    assert wire.requests == []


# --------------------------------------------------------------------------- Anthropic vision


def test_anthropic_vision_sends_image_blocks_then_the_objective() -> None:
    client, wire = anthropic((200, A["vision"]))
    analysis = client.view_media(MediaRequest(
        (PHOTO, to_media("https://cdn.example.com/side.webp")), "Is it damaged?",
        model="claude-sonnet-5-5", output_schema=SCHEMA, params={"max_tokens": 512}))

    [body] = wire.bodies
    assert str(wire.requests[0].url) == "https://api.anthropic.com/v1/messages"
    assert body["model"] == "claude-sonnet-5-5" and body["max_tokens"] == 512
    assert body["system"][0]["text"] == VIEW_INSTRUCTIONS
    assert body["messages"] == [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": PHOTO.base64()}},
        {"type": "image", "source": {"type": "url",
                                     "url": "https://cdn.example.com/side.webp"}},
        {"type": "text", "text": "Objective: Is it damaged?"},
    ]}]
    assert body["output_config"] == {"format": {"type": "json_schema", "schema": SCHEMA}}
    assert analysis.data == {"damaged": True, "part": "spout"}
    assert analysis.usage == Usage(input_tokens=1623, output_tokens=21)
    assert (analysis.model, analysis.provider) == ("claude-sonnet-5-5", "anthropic")


def test_anthropic_reads_a_pdf_as_a_titled_document_block() -> None:
    client, wire = anthropic((200, A["document"]))
    analysis = client.view_media(MediaRequest((to_media(PDF, name="invoice.pdf"),),
                                              "Date and total?", model="claude-sonnet-5-5"))
    block = wire.bodies[0]["messages"][0]["content"][0]
    assert block["type"] == "document" and block["title"] == "invoice.pdf"
    assert block["source"]["media_type"] == "application/pdf"
    assert analysis.text.startswith("The invoice is dated") and analysis.data is None


def test_anthropic_media_errors_are_model_errors_without_the_key(
        caplog: pytest.LogCaptureFixture) -> None:
    client, _ = anthropic((400, A["invalid_image"]))
    with pytest.raises(ModelError, match="image exceeds 5 MB maximum") as info:
        client.view_media(MediaRequest((PHOTO,), "Look", model="claude-sonnet-5-5"))
    assert info.value.status == 400 and not info.value.retryable
    assert_secret_absent(ANTHROPIC_KEY, info.value, caplog.records)


def test_anthropic_refuses_media_it_cannot_read() -> None:
    client, wire = anthropic()
    with pytest.raises(MediaError, match="not 'video/mp4'"):
        client.view_media(MediaRequest((to_media(b"\x00", mime_type="video/mp4"),), "Watch",
                                       model="claude-sonnet-5-5"))
    assert wire.requests == []


def test_capabilities_are_read_from_declared_flags_only():
    from turnkit_django.clients import BaseClient, supports

    class Sniffable(BaseClient):
        def stream(self, request, on_chunk):  # a method, but no declaration
            return self.complete(request)

    class Declares(BaseClient):
        supports_streaming = True

    class Truthy(BaseClient):
        supports_streaming = 1  # type: ignore[assignment]

    assert not supports(Sniffable(), "streaming")
    assert supports(Declares(), "streaming")
    assert not supports(Truthy(), "streaming")
    assert not supports(object(), "thinking")
