"""Streaming test clients: ``ScriptedClient`` and ``FunctionClient`` stream their replies.

``reply("hello world", chunks=4, delay=0.05)`` is answered to a streaming call (an inline run
with ``on_delta=``) as four text chunks, ``delay`` seconds apart, so a streaming UI can be tested
without a provider; a tool call's JSON arguments come as one chunk per call. A plain call
(``complete``) returns the same response at once.
"""

from __future__ import annotations

import json
import time

from ..clients.protocol import ModelRequest, ModelResponse
from ..conf.deltas import ChunkCallback
from ..messages import ToolCallPart

#: A scripted answer: the response, the number of text chunks, the seconds between chunks.
Answer = tuple[ModelResponse, int, float]


def split(text: str, chunks: int) -> list[str]:
    """``text`` in ``chunks`` pieces of about the same size (fewer when it is shorter)."""
    size = -(-len(text) // max(chunks, 1)) or 1
    return [text[i:i + size] for i in range(0, len(text), size)]


class Chunked:
    """Mixin of the scripted clients: ``complete`` and ``stream`` from ``_answer(request)``."""

    supports_streaming = True

    def _answer(self, request: ModelRequest) -> Answer:
        raise NotImplementedError

    def complete(self, request: ModelRequest) -> ModelResponse:
        return self._answer(request)[0]

    def stream(self, request: ModelRequest, on_chunk: ChunkCallback) -> ModelResponse:
        response, chunks, delay = self._answer(request)
        pieces: list[tuple[str, str]] = [("text", piece) for piece in split(response.text, chunks)]
        pieces += [("tool_arguments", call.raw_arguments if call.raw_arguments is not None
                    else json.dumps(call.arguments)) for call in response.parts
                   if isinstance(call, ToolCallPart)]
        for i, (kind, piece) in enumerate(pieces):
            if i and delay:
                time.sleep(delay)  # a model writing: pacing for the UI under test
            on_chunk(kind, piece)  # type: ignore[arg-type]
        return response


__all__ = ["Answer", "Chunked", "split"]
