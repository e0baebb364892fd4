"""Images and analyses in a transcript (the admin's turn and conversation pages, text, JSON).

An ``image`` message shows a thumbnail (the provider's URL, else the storage's URL; provider
URLs may have expired) or, when neither is known, the storage alias and name; an analysis shows
its objective, text, structured data and the media it looked at. The call's model, size,
usage, cost, idempotency key and tool execution come from the message's metadata. Never bytes
(a part holds none); text and JSON output leave URLs' query strings (signatures) out. Nothing
here queries the database (a storage may compute a URL).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from decimal import Decimal
from typing import NotRequired, TypedDict
from urllib.parse import urlsplit

from ..base.serialization import JsonObject, JsonValue
from ..clients.media import public_url, web_url
from ..exceptions import MediaError
from ..messages import ImagePart, MediaAnalysisPart
from ..models import Message
from ..store.media import image_url


@dataclass(frozen=True)
class CallFacts:
    """What the media call that made a message cost and where it came from."""

    model: str = ""
    provider: str = ""
    size: str = ""
    usage: dict[str, int] = field(default_factory=dict)
    cost: str | None = None
    idempotency_key: str = ""
    tool_call_id: str = ""
    tool_execution_id: str = ""

    @classmethod
    def of(cls, message: Message) -> CallFacts:
        meta = message.metadata or {}
        return cls(str(meta.get("model") or ""), str(meta.get("provider") or ""),
                   str(meta.get("size") or ""), dict(meta.get("usage") or {}), meta.get("cost"),
                   str(meta.get("idempotency_key") or ""), str(meta.get("tool_call_id") or ""),
                   str(message.tool_execution_id or ""))

    @property
    def cost_value(self) -> Decimal | None:
        return None if self.cost is None else Decimal(str(self.cost))

    @property
    def usage_text(self) -> str:
        return ", ".join(f"{value:,} {key.removesuffix('_tokens').replace('_', ' ')}"
                         for key, value in self.usage.items() if value)


@dataclass(frozen=True)
class ImageView:
    """One generated image as the transcript shows it."""

    part: ImagePart
    url: str | None
    facts: CallFacts

    def as_json(self) -> JsonObject:
        p = self.part
        # A URL's query string may sign it: JSON output (turnkit_inspect) leaves it out.
        url = None if self.url is None else public_url(self.url)
        return {"id": p.id, "mime_type": p.mime_type, "url": url, "storage": p.storage,
                "name": p.name, "prompt": p.prompt, "revised_prompt": p.revised_prompt,
                "model": self.facts.model, "cost": self.facts.cost,
                "tool_execution": self.facts.tool_execution_id or None}


@dataclass(frozen=True)
class Medium:
    """One image or document an analysis looked at (its description, never its bytes)."""

    name: str
    mime_type: str
    size: int | None
    sha256: str
    source: str
    url: str

    @property
    def digest(self) -> str:
        return self.sha256[:12]


@dataclass(frozen=True)
class AnalysisView:
    """One media analysis as the transcript shows it."""

    part: MediaAnalysisPart
    facts: CallFacts

    @property
    def media(self) -> list[Medium]:
        return [Medium(str(m.get("name") or ""), str(m.get("mime_type") or ""),
                       m.get("size") if isinstance(m.get("size"), int) else None,
                       str(m.get("sha256") or ""), str(m.get("source") or ""),
                       str(m.get("url") or "")) for m in self.part.media]

    @property
    def data_json(self) -> str:
        return json.dumps(self.part.data, indent=2, ensure_ascii=False, default=str)

    def as_json(self) -> JsonObject:
        p = self.part
        return {"objective": p.objective, "text": p.text, "data": p.data, "media": list(p.media),
                "model": self.facts.model, "cost": self.facts.cost,
                "tool_execution": self.facts.tool_execution_id or None}


class TranscriptItem(TypedDict):
    """A transcript part that is neither text nor a tool call or result: its type
    (``thinking``, ``data``, ``image``, ``analysis``, ``other``), its JSON value and, for media,
    its view."""

    type: str
    value: JsonValue
    view: NotRequired[ImageView | AnalysisView]


def media_item(message: Message, part: ImagePart | MediaAnalysisPart) -> TranscriptItem:
    """A transcript item: ``{"type": "image" | "analysis", "value": <JSON>, "view": ...}``."""
    facts = CallFacts.of(message)
    view: ImageView | AnalysisView
    if isinstance(part, ImagePart):
        view = ImageView(part, link(part), facts)
        return {"type": "image", "value": view.as_json(), "view": view}
    view = AnalysisView(part, facts)
    return {"type": "analysis", "value": view.as_json(), "view": view}


def link(part: ImagePart) -> str | None:
    """The URL the console links and shows: the provider's if it is http(s)
    (:func:`~.clients.media.web_url`), else the storage's if it is http(s) or relative; never a
    ``javascript:`` or other URL a provider, a custom client or an old row may hold."""
    if part.url:
        try:
            return web_url(part.url)
        except MediaError:
            pass  # a row recorded before provider URLs were checked: try the storage
    stored = image_url(replace(part, url=None))
    if stored is None or urlsplit(stored).scheme not in ("", "http", "https"):
        return None
    return stored


def media_line(item: Mapping[str, object]) -> str:
    """One line of a text transcript for a media item."""
    view = item["view"]
    if not isinstance(view, ImageView | AnalysisView):
        raise TypeError(f"a media item carries an ImageView or an AnalysisView, got {view!r}")
    if isinstance(view, ImageView):
        where = "stored" if view.part.name else "at its URL"
        return f"▣ image {view.part.id} ({view.part.mime_type}, {where}): {view.part.prompt}"
    names = ", ".join(m.name or m.mime_type for m in view.media) or "media"
    return f"◎ analysis of {names}: {view.part.text}"


__all__ = ["AnalysisView", "CallFacts", "ImageView", "Medium", "TranscriptItem", "link",
           "media_item", "media_line"]
