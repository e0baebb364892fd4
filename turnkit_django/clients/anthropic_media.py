"""Media blocks of the Anthropic Messages API, for ``AnthropicClient.view_media``."""

from __future__ import annotations

from ..base.serialization import JsonObject
from ..exceptions import MediaError
from .media import MediaInput


def media_block(media: MediaInput) -> JsonObject:
    """The ``image`` or ``document`` block of one image or PDF (base64 bytes or a URL)."""
    if media.is_image:
        kind = "image"
    elif media.is_pdf:
        kind = "document"
    else:
        raise MediaError(f"Anthropic view_media takes images (PNG, JPEG, GIF, WebP) and PDFs, "
                         f"not {media.mime_type!r} ({media.name!r})")
    source: JsonObject
    if media.url is not None:
        source = {"type": "url", "url": media.url}
    else:
        source = {"type": "base64", "media_type": media.mime_type, "data": media.base64()}
    block: JsonObject = {"type": kind, "source": source}
    if kind == "document" and media.name:
        block["title"] = media.name
    return block


__all__ = ["media_block"]
