"""Inline live output: the chunks of a turn's model calls handed to ``on_delta=`` as
:class:`~turnkit_django.deltas.Delta` values while the call runs.

The model call runs inside the turn's ``waiting_for`` (no transaction open, no database session
held), and so does every ``on_delta`` call. A delta is stamped with the turn, the claim's fence
and an index running over the turn's model calls in this claim. Nothing is written: the message
the step commits is built from the completed stream. An exception from ``on_delta`` never breaks
the turn: the first one is logged (with its traceback), later ones are not, and the deltas after
it are still delivered.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable

from ..clients import Client, ModelRequest, ModelResponse
from ..conf import turnkit_settings
from ..deltas import Delta, DeltaCallback, DeltaKind

logger = logging.getLogger("turnkit_django.runtime")


class DeltaSink:
    """Where one claimed turn's deltas go: ``callback``, stamped with the turn and fence."""

    def __init__(self, callback: DeltaCallback, turn_id: str, fence: int) -> None:
        self.callback = callback
        self.turn_id = turn_id
        self.fence = fence
        self._index = itertools.count()
        self.failed = False

    def __call__(self, kind: DeltaKind, text: str) -> None:
        if not text:
            return
        delta = Delta(self.turn_id, self.fence, next(self._index), kind, text)
        try:
            self.callback(delta)
        except Exception:
            if not self.failed:
                self.failed = True
                logger.exception("on_delta raised for turn %s (delta %d); the turn goes on, "
                                 "and further errors of this callback are not logged",
                                 self.turn_id, delta.index)


def model_call(client: Client, sink: DeltaSink | None) -> Callable[[ModelRequest], ModelResponse]:
    """How to call ``client``: streamed to ``sink`` when someone listens, the client can and
    ``TURNKIT["STREAMING"]`` allows it; else a plain ``complete``."""
    if sink is None or not turnkit_settings.STREAMING or not getattr(
            client, "supports_streaming", False):
        return client.complete
    stream = client.stream  # type: ignore[attr-defined]  # declared by supports_streaming
    return lambda request: stream(request, sink)


__all__ = ["DeltaSink", "model_call"]
