"""What later model calls see of images and analyses: text, never bytes or hidden metadata.

:func:`project_media` rewrites the messages of a model request:

* a media message made from a tool (its metadata names the ``tool_call_id``) is folded into that
  call's result: the result becomes text, the tool's own result first, then one description per
  media message. Every tool exchange stays as providers require it (the results right after
  their calls), and a request after such a tool still ends with a tool result;
* a media message of its own (``paint`` or ``view_media`` on a pending turn) becomes an
  assistant text message describing it;
* a media message whose tool call has no result in the request yet (the call is still running)
  is left out.

An image is described by its id (tools may refer to it), MIME type and prompt; an analysis by
its objective, the names, types and sizes of what was analysed, its text and structured data.
URLs, storage names, digests, usage, cost and every other metadata stay out.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import replace
from operator import attrgetter

from ..base.serialization import JsonMapping
from ..messages import (
    MEDIA_KINDS,
    ChatMessage,
    ImagePart,
    MediaAnalysisPart,
    Part,
    TextPart,
    ToolResultPart,
)


def project_media(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """Return ``messages`` with media messages replaced by their descriptions (see above)."""
    if MEDIA_KINDS.isdisjoint(map(attrgetter("kind"), messages)):
        return list(messages)  # the usual transcript: nothing to describe (a scan in C)
    notes: dict[str, list[str]] = {}
    for message in messages:
        call_id = message.metadata.get("tool_call_id") if message.kind in MEDIA_KINDS else None
        if call_id:
            notes.setdefault(str(call_id), []).append(describe(message))
    out: list[ChatMessage] = []
    for message in messages:
        if message.kind in MEDIA_KINDS:
            if not message.metadata.get("tool_call_id"):
                out.append(ChatMessage("assistant", (TextPart(describe(message)),),
                                       message.kind, message.sequence))
            continue
        if notes and message.role == "tool":
            parts = tuple(_with_notes(p, notes) for p in message.parts)
            message = replace(message, parts=parts)
        out.append(message)
    return out


def _with_notes(part: Part, notes: dict[str, list[str]]) -> Part:
    if not isinstance(part, ToolResultPart) or part.tool_call_id not in notes:
        return part
    text = "\n\n".join([_render(part.content), *notes[part.tool_call_id]])
    return replace(part, content=text)


def describe(message: ChatMessage) -> str:
    """The text a model sees for one ``image`` or ``media_analysis`` message."""
    images = [p for p in message.parts if isinstance(p, ImagePart)]
    analyses = [p for p in message.parts if isinstance(p, MediaAnalysisPart)]
    lines = [describe_image(p) for p in images] + [describe_analysis(p) for p in analyses]
    return "\n".join(lines) or f"[{message.kind} message without content]"


def describe_image(part: ImagePart) -> str:
    text = f"[Generated image {part.id}] {part.mime_type}"
    if part.prompt:
        text += f", from the prompt: {json.dumps(part.prompt, ensure_ascii=False)}"
    if part.revised_prompt and part.revised_prompt != part.prompt:
        revised = json.dumps(part.revised_prompt, ensure_ascii=False)
        text += f" (the provider revised it to {revised})"
    return text + ". The application holds the image; you cannot see it."


def describe_analysis(part: MediaAnalysisPart) -> str:
    media = ", ".join(_medium(m) for m in part.media) or "media"
    lines = [f"[Media analysis] of {media}"
             + (f" for the objective {json.dumps(part.objective, ensure_ascii=False)}"
                if part.objective else "") + ":"]
    if part.text:
        lines.append(part.text)
    if part.data is not None:
        lines.append(f"Structured result: {_render(part.data)}")
    return "\n".join(lines)


def _medium(info: JsonMapping) -> str:
    name = info.get("name") or "unnamed"
    details = [str(info.get("mime_type") or "unknown type")]
    size = info.get("size")
    if isinstance(size, int):
        details.append(_size(size))
    return f"{name} ({', '.join(details)})"


def _size(count: int) -> str:
    if count < 1024:
        return f"{count} bytes"
    if count < 1024 * 1024:
        return f"{count / 1024:.1f} KB"
    return f"{count / (1024 * 1024):.1f} MB"


def _render(value: object) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


__all__ = ["describe", "describe_analysis", "describe_image", "project_media"]
