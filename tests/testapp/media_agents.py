"""The media scenario's agent (tests/e2e/test_media_faults.py), registered in every process.

``e2e_media`` calls one tool that looks at an uploaded file (``turn.view_media`` on the
``FileField`` of an :class:`~tests.testapp.models.Upload`) and then paints (``turn.paint``).
Both go to one ``OpenAIClient`` whose transport is the provider's HTTP edge, faked here: it writes
every request to the e2e ledger, outside turnkit's tables, and, like a provider that honours
``Idempotency-Key``, charges a key once (``image.paid``) and answers a repeated key with the
same image. The first image request of a run waits at gate ``e2e-paint``, so the test can
SIGKILL the worker in the middle of the paid call.
"""

from __future__ import annotations

import base64
import json
import os
from typing import Any

import httpx

from turnkit_django import Agent, ToolContext, register, tool
from turnkit_django.clients import OpenAIClient
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.messages import MEDIA_KINDS
from turnkit_django.testing import PNG, Entry, FunctionClient, call, reply

from .ledger import LEDGER_ENV, gate, read, record
from .models import Upload

MEDIA_AGENT = "e2e_media"
PAINT_GATE = "e2e-paint"
DAMAGE = {"type": "object", "properties": {"damaged": {"type": "boolean"}},
          "required": ["damaged"], "additionalProperties": False}


def _paid(key: str) -> bool:
    path = os.environ.get(LEDGER_ENV)
    return bool(path) and any(e["ev"] == "image.paid" and e.get("key") == key
                              for e in read(path or ""))


def provider(request: httpx.Request) -> httpx.Response:
    """The OpenAI-compatible API: images and vision, with real answer shapes."""
    if request.url.path.endswith("/images/generations"):
        key = request.headers.get("idempotency-key", "")
        record("image.request", key=key)
        if not _paid(key):
            record("image.paid", key=key)
        gate(PAINT_GATE, key=key)
        return httpx.Response(200, json={
            "created": 1764480100, "data": [{"b64_json": base64.b64encode(PNG).decode()}],
            "output_format": "png", "size": "1024x1024",
            "usage": {"input_tokens": 12, "input_tokens_details": {"text_tokens": 12,
                                                                   "image_tokens": 0},
                      "output_tokens": 272, "total_tokens": 284}})
    body = json.loads(request.content)
    parts = body["messages"][-1]["content"]
    record("vision", parts=[p["type"] for p in parts])
    return httpx.Response(200, json={
        "id": "chatcmpl-e2e", "object": "chat.completion", "created": 1764480101,
        "model": body["model"],
        "choices": [{"index": 0, "finish_reason": "stop", "message": {
            "role": "assistant", "content": json.dumps({"damaged": True})}}],
        "usage": {"prompt_tokens": 900, "completion_tokens": 6, "total_tokens": 906}})


PROVIDER = OpenAIClient(api_key="sk-e2e-provider-key", base_url="https://provider.e2e.test/v1",
                        transport=httpx.MockTransport(provider), max_retries=0)


def _inspect_and_paint(ctx: ToolContext, upload_id: int) -> dict[str, Any]:
    upload = Upload.objects.get(pk=upload_id)
    analysis = ctx.turn.view_media(upload.file, objective="Is the item damaged?",
                                   output_schema=DAMAGE, model="gpt-5.4-mini", client=PROVIDER)
    image = ctx.turn.paint("A replacement teapot on a white background", model="gpt-image-1",
                           size="1024x1024", client=PROVIDER)
    return {"damaged": (analysis.data or {}).get("damaged"), "image": image.message_id}


@tool
def inspect_and_paint(ctx: ToolContext, upload_id: int) -> dict[str, Any]:
    """Look at the customer's upload, then paint a replacement (not replay-safe)."""
    return _inspect_and_paint(ctx, upload_id)


@tool(recovery="replay_safe")
def inspect_and_paint_safe(ctx: ToolContext, upload_id: int) -> dict[str, Any]:
    """The same, declared replay-safe: the provider deduplicates paid calls by key."""
    return _inspect_and_paint(ctx, upload_id)


def respond(request: ModelRequest) -> Entry:
    """Call the tool named in the task once, then answer; ignores the tool's media messages."""
    inputs = [i for i, m in enumerate(request.messages) if m.role == "user"]
    task = json.loads(request.messages[inputs[-1]].text)
    steps = sum(1 for m in request.messages[inputs[-1] + 1:]
                if m.role == "assistant" and m.kind not in MEDIA_KINDS)
    if steps == 0:
        return call(task["tool"], id=f"call_{request.metadata.get('turn_id')}",
                    upload_id=task["upload_id"])
    return reply("A replacement is on its way.")


register(Agent(MEDIA_AGENT, instructions="Inspect, then paint.", model="gpt-5.4-mini",
               tools=[inspect_and_paint, inspect_and_paint_safe], client=FunctionClient(respond)))
