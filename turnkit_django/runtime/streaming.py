"""Live output: the chunks of a turn's model calls handed to ``on_delta=`` (inline) and
published on the delta channel (:mod:`turnkit_django.conf.delta_channel`, for ``run.stream()`` and
the SSE view) as :class:`~turnkit_django.conf.deltas.Delta` values while the call runs.

The model call runs inside the turn's ``waiting_for`` (no transaction open, no database session
held), and so does every ``on_delta`` call and every publish. A delta is stamped with the turn,
the claim's fence and an index running over the turn's model calls in this claim. Nothing is
written: the message the step commits is built from the completed stream. An exception from
``on_delta`` never breaks the turn: the first one is logged (with its traceback), later ones are
not, and the deltas after it are still delivered. A publish that fails is logged once and the
claim publishes no more (a channel that is down must not slow the turn down chunk by chunk).
The model is asked to stream only when someone listens: an ``on_delta``, a Redis channel, or a
reader of the run subscribed in this process.
"""

from __future__ import annotations

import itertools
import logging
import threading
from collections.abc import Callable

from ..clients import Client, ModelRequest, ModelResponse
from ..clients.protocol import supports
from ..conf import turnkit_settings
from ..conf.delta_channel import Channel, LocalChannel, RedisChannel
from ..conf.deltas import Delta, DeltaCallback, DeltaKind

logger = logging.getLogger("turnkit_django.runtime")


class DeltaSink:
    """Where one claimed turn's deltas go: ``callback`` (inline ``on_delta=``) and ``channel``
    (the run's readers), stamped with the turn and fence."""

    def __init__(self, callback: DeltaCallback | None, turn_id: str, fence: int,
                 channel: Channel | None = None, root_id: str = "") -> None:
        self.callback = callback
        self.turn_id = turn_id
        self.fence = fence
        self.channel = channel
        self.root_id = root_id or turn_id
        self._index = itertools.count()
        self.failed = False
        self.publish_failed = False

    @property
    def listening(self) -> bool:
        """Whether a model call should stream now."""
        return self.callback is not None or (
            self.channel is not None and not self.publish_failed
            and self.channel.may_listen(self.root_id))

    def __call__(self, kind: DeltaKind, text: str) -> None:
        if not text:
            return
        delta = Delta(self.turn_id, self.fence, next(self._index), kind, text)
        if self.channel is not None and not self.publish_failed:
            self._publish(self.channel, delta)
        if self.callback is None:
            return
        try:
            self.callback(delta)
        except Exception:
            if not self.failed:
                self.failed = True
                logger.exception("on_delta raised for turn %s (delta %d); the turn goes on, "
                                 "and further errors of this callback are not logged",
                                 self.turn_id, delta.index)

    def _publish(self, channel: Channel, delta: Delta) -> None:
        try:
            channel.publish(self.root_id, delta)
        except Exception:
            self.publish_failed = True
            logger.exception("publishing a delta of turn %s failed; the turn goes on without "
                             "publishing its deltas until it is claimed again", self.turn_id)


_lock = threading.Lock()
_channels: dict[str | None, Channel] = {}


def channel_url() -> str | None:
    """The Redis URL of the delta channel: DELTA_CHANNEL, else the Celery broker when it is
    Redis, else None (this process)."""
    if turnkit_settings.DELTA_CHANNEL:
        return turnkit_settings.DELTA_CHANNEL
    try:
        from celery import current_app  # noqa: PLC0415 - optional, read on first use
    except ImportError:
        return None
    broker = str(current_app.conf.broker_url or "")
    return broker if broker.startswith(("redis://", "rediss://")) else None


def delta_channel() -> Channel:
    """The delta channel of this process (one per Redis URL; a shared in-process one
    without)."""
    url = channel_url()
    with _lock:
        found = _channels.get(url)
        if found is None:
            found = _channels[url] = LocalChannel() if url is None else RedisChannel.from_url(url)
        return found


def delta_sink(on_delta: DeltaCallback | None, turn_id: str, fence: int,
               root_id: str) -> DeltaSink | None:
    """The sink of a claimed turn: its ``on_delta`` and the delta channel (None: nobody can
    listen, ``STREAMING`` is off)."""
    if not turnkit_settings.STREAMING:
        return None
    try:
        channel: Channel | None = delta_channel()
    except Exception:  # the redis library missing, a URL it refuses
        logger.exception("no delta channel for turn %s; its deltas are not published", turn_id)
        channel = None
    if channel is None and on_delta is None:
        return None
    return DeltaSink(on_delta, turn_id, fence, channel, root_id)


def model_call(client: Client, sink: DeltaSink | None) -> Callable[[ModelRequest], ModelResponse]:
    """How to call ``client``: streamed to ``sink`` when someone listens, the client can and
    ``TURNKIT["STREAMING"]`` allows it; else a plain ``complete``."""
    if sink is None or not turnkit_settings.STREAMING or not supports(client, "streaming") or (
            not sink.listening):
        return client.complete
    stream = client.stream  # type: ignore[attr-defined]  # declared by supports("streaming")
    return lambda request: stream(request, sink)


__all__ = ["DeltaSink", "channel_url", "delta_channel", "delta_sink", "model_call"]
