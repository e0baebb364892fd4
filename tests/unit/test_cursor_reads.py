"""Cursor reads (issue 16; TurnKit 0.7.0 ``messages_after``): ``conv.messages(after=n)`` gives
what an application may show: thinking and opaque provider parts stripped, dynamic context
snapshots left out, unless ``include_private=True``. The stored rows are never changed."""

from __future__ import annotations

import pytest

from turnkit_django import Agent
from turnkit_django.clients import ModelResponse
from turnkit_django.messages import ProviderPart, TextPart, ThinkingPart
from turnkit_django.models import Message
from turnkit_django.testing import ScriptedClient

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("invariants")]

PARTS = (ThinkingPart("Let me think.", signature="sig", provider="anthropic"),
         ProviderPart("anthropic", {"type": "server_tool_use", "id": "x"}),
         TextPart("The answer is 4."))


def conversation():
    client = ScriptedClient([ModelResponse(PARTS, model="scripted")])
    conv = Agent("thinker", client=client).conversation()
    conv.ask("2 + 2?")
    return conv


def test_thinking_and_provider_parts_are_stripped_from_a_cursor_read():
    conv = conversation()

    question, answer = conv.messages(after=0)
    assert question.content == [{"kind": "text", "text": "2 + 2?"}]
    assert answer.content == [{"kind": "text", "text": "The answer is 4."}]
    assert [m.sequence for m in conv.messages(after=1)] == [2]
    assert conv.messages(after=1).get().content == answer.content  # querysets keep it up
    # The transcript itself is untouched.
    stored = Message.objects.get(pk=answer.pk)
    assert [p["kind"] for p in stored.content] == ["thinking", "provider", "text"]


def test_include_private_returns_the_parts_as_stored():
    conv = conversation()
    (answer,) = conv.messages(after=1, include_private=True)
    assert [p["kind"] for p in answer.content] == ["thinking", "provider", "text"]
