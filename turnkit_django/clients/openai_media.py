"""Images and vision for :class:`~turnkit_django.clients.openai.OpenAIClient`.

``paint`` uses the images API:

- no input images: ``POST {base_url}/images/generations``, a JSON body ``{model, prompt, size,
  ...params}``;
- input images: ``POST {base_url}/images/edits``, a multipart form: the scalar fields, one
  ``image`` file part (``image[]`` parts when there are several) and an optional ``mask`` part.
  Edits upload the bytes, so a reference given as a URL is refused (``MediaError``); nothing is
  downloaded on the provider's behalf.

The answer is ``{"created", "data": [{"b64_json" | "url", "revised_prompt"}], "usage",
"output_format", "size", ...}``. GPT image models answer with base64 bytes and token usage
(``input_tokens_details`` splits text from image input; cached text is ``cache_read``); DALL-E
answers with URLs that expire after an hour, and no usage (so no known cost).

A paid generation may have been carried out when its answer timed out, so ``paint`` retries only
what the provider cannot have taken (connection failures, 429, 5xx) and sends
``request.idempotency_key`` as an ``Idempotency-Key`` header on every attempt, for gateways that
deduplicate by key.

``view_media`` asks chat completions about images (``image_url`` parts: an https URL or a
``data:`` URL) and PDFs (``file`` parts with the bytes as a data URL; the API takes no PDF URL).
"""

from __future__ import annotations

import base64
import binascii
import json
from functools import partial
from typing import Protocol

from ..base.serialization import JsonMapping, JsonObject, JsonValue
from ..exceptions import MediaError, ModelError
from ..messages import ProviderPart
from ._http import error_message, member, text_or_none
from .media import (
    GeneratedImage,
    ImageRequest,
    ImageResult,
    MediaAnalysis,
    MediaInput,
    MediaRequest,
    analysis_from,
    analysis_request,
)
from .openai_http import Files
from .protocol import ModelRequest, ModelResponse, Usage, json_int

PROVIDER = "openai"
DEFAULT_IMAGE_MODEL = "gpt-image-1"
_FORMATS = {"png": "image/png", "jpeg": "image/jpeg", "jpg": "image/jpeg", "webp": "image/webp"}


class MediaClient(Protocol):
    """What ``paint`` and ``view_media`` use of the ``OpenAIClient`` they are given."""

    image_model: str
    image_timeout: float

    def _ready(self) -> str | None: ...

    def _url(self, path: str) -> str: ...

    def _label(self) -> str: ...

    def _secrets(self) -> tuple[str, ...]: ...

    def _post(self, url: str, key: str | None, *, json: JsonMapping | None = None,
              data: dict[str, str] | None = None, files: Files | None = None,
              headers: dict[str, str] | None = None, timeout: float | None = None,
              retry_read_timeouts: bool = True) -> JsonObject: ...

    def complete(self, request: ModelRequest) -> ModelResponse: ...


# --------------------------------------------------------------------------- paint


def paint(client: MediaClient, request: ImageRequest) -> ImageResult:
    """Generate or edit images for ``request``; see the module docstring."""
    key = client._ready()
    model = request.model or client.image_model
    headers = {"Idempotency-Key": request.idempotency_key} if request.idempotency_key else None
    post = partial(client._post, headers=headers, timeout=client.image_timeout,
                   retry_read_timeouts=False)
    if request.is_edit:
        data, files = edit_form(request, model)
        body = post(client._url("/images/edits"), key, data=data, files=files)
    else:
        body = post(client._url("/images/generations"), key,
                    json=generation_body(request, model))
    return parse_images(body, model, client._label(), client._secrets())


def generation_body(request: ImageRequest, model: str) -> JsonObject:
    """The JSON body of ``POST /images/generations``."""
    body: JsonObject = {"model": model, "prompt": request.prompt}
    if request.size:
        body["size"] = request.size
    body.update(request.params)
    return body


def edit_form(request: ImageRequest, model: str
              ) -> tuple[dict[str, str], list[tuple[str, tuple[str, bytes, str]]]]:
    """The fields and file parts of ``POST /images/edits`` (multipart)."""
    fields: JsonObject = {"model": model, "prompt": request.prompt}
    if request.size:
        fields["size"] = request.size
    fields.update(request.params)
    data = {k: v if isinstance(v, str) else json.dumps(v) for k, v in fields.items()}
    field_name = "image[]" if len(request.input_images) > 1 else "image"
    files = [(field_name, _file(image, f"image-{n}")) for n, image in
             enumerate(request.input_images, 1)]
    if request.mask is not None:
        files.append(("mask", _file(request.mask, "mask")))
    return data, files


def _file(media: MediaInput, fallback: str) -> tuple[str, bytes, str]:
    if media.data is None:
        raise MediaError(
            f"OpenAI image edits upload the image: {media.name or fallback!r} is a URL; pass "
            "its file, path or bytes instead"
        )
    if not media.is_image:
        raise MediaError(f"OpenAI image edits take PNG, JPEG or WebP images, not "
                         f"{media.mime_type!r} ({media.name or fallback!r})")
    extension = media.mime_type.split("/")[-1]
    return media.name or f"{fallback}.{extension}", media.data, media.mime_type


def parse_images(body: JsonObject, model: str, label: str,
                 secrets: tuple[str, ...]) -> ImageResult:
    """Translate an images API answer into an :class:`ImageResult`."""
    items = body.get("data")
    if not isinstance(items, list) or not items:
        raise ModelError(error_message(label, None, None, "the answer holds no images",
                                       secrets))
    mime = _FORMATS.get(str(body.get("output_format") or "png"), "image/png")
    images = []
    for value in items:
        item = value if isinstance(value, dict) else {}
        images.append(GeneratedImage(mime_type=mime, url=text_or_none(item.get("url")) or None,
                                     data=_image_bytes(item.get("b64_json"), label),
                                     revised_prompt=text_or_none(item.get("revised_prompt"))
                                     or None))
    return ImageResult(images=tuple(images), model=model, usage=image_usage(body.get("usage")),
                       provider=PROVIDER, size=text_or_none(body.get("size")))


def _image_bytes(encoded: JsonValue, label: str) -> bytes | None:
    if not encoded:
        return None
    try:
        if isinstance(encoded, str):
            return base64.b64decode(encoded, validate=True)
    except (binascii.Error, ValueError):
        pass
    raise ModelError(f"{label} returned an image that is not valid base64")


def image_usage(usage: object) -> Usage:
    """Usage of an images API answer: text, cached text and image input, image output."""
    if not isinstance(usage, dict):
        return Usage()
    details = member(usage, "input_tokens_details")
    total_input = json_int(usage.get("input_tokens"))
    image_tokens = json_int(details.get("image_tokens"))
    cached = json_int(details.get("cached_tokens"))
    text = json_int(details.get("text_tokens")) or max(total_input - image_tokens, 0)
    return Usage(input_tokens=max(text - cached, 0), output_tokens=json_int(usage.get(
        "output_tokens")), cache_read_tokens=cached, image_input_tokens=image_tokens)


# --------------------------------------------------------------------------- view_media


def view_media(client: MediaClient, request: MediaRequest) -> MediaAnalysis:
    """Answer ``request.objective`` about its images and PDFs through chat completions."""
    parts = [ProviderPart(PROVIDER, content_part(media)) for media in request.media]
    response = client.complete(analysis_request(request, parts))
    return analysis_from(response)


def content_part(media: MediaInput) -> JsonObject:
    """The chat completions content part of one image or PDF."""
    if media.is_image:
        return {"type": "image_url", "image_url": {"url": media.data_url()}}
    if media.is_pdf:
        if media.data is None:
            raise MediaError(f"OpenAI chat completions take PDFs as bytes, not URLs: pass the "
                             f"file, path or bytes of {media.name or media.url!r}")
        return {"type": "file", "file": {"filename": media.name or "document.pdf",
                                         "file_data": media.data_url()}}
    raise MediaError(f"OpenAI view_media takes images (PNG, JPEG, GIF, WebP) and PDFs, not "
                     f"{media.mime_type!r} ({media.name!r})")


__all__ = ["DEFAULT_IMAGE_MODEL", "content_part", "edit_form", "generation_body", "image_usage",
           "paint", "parse_images", "view_media"]
