"""Where a background turn's deltas travel to its readers (``run.stream()``, the SSE view):
``TURNKIT["DELTA_CHANNEL"]`` (system check ``turnkit.E027``), cleaned here for
:mod:`turnkit_django.conf`, and the two channels.

- :class:`LocalChannel`: a thread-safe fan-out in this process, for inline runs and the
  embedded default (a turn run by a thread of the reader's process). A turn's deltas are handed
  on only while someone here subscribes to its run.
- :class:`RedisChannel`: Redis pub/sub, one channel per run (``turnkit:deltas:<root turn id>``),
  each delta one ``PUBLISH`` of its JSON ``{turn_id, fence, index, kind, text}``.

Nothing here reads settings or the database; :mod:`turnkit_django.runtime.streaming` chooses
the channel. Deltas are ephemeral: a reader that was not subscribed when one was published never
sees it, and the step's committed message supersedes them all.
"""

from __future__ import annotations

import contextlib
import json
import queue
import threading
import time
from typing import Any, Protocol

from .deltas import Delta
from .setting_errors import InvalidSetting, SettingProblem

PREFIX = "turnkit:deltas:"
#: Seconds a Redis call of a publisher or a reader may take before it counts as failed.
REDIS_TIMEOUT = 2.0


def channel_name(root_id: str) -> str:
    """The pub/sub channel of one run's deltas."""
    return f"{PREFIX}{root_id}"


def encode(delta: Delta) -> str:
    return json.dumps(delta.as_dict(), separators=(",", ":"))


def decode(data: bytes | str) -> Delta | None:
    """A published delta, or None when the message is not one (ignored)."""
    try:
        raw = json.loads(data)
        return Delta(str(raw["turn_id"]), int(raw["fence"]), int(raw["index"]), raw["kind"],
                     str(raw["text"]))
    except (ValueError, TypeError, KeyError):
        return None


class Subscription(Protocol):
    def get(self, timeout: float) -> list[Delta]:
        """The deltas received since the last call; waits up to ``timeout`` seconds for the
        first one (0: does not wait)."""

    def close(self) -> None: ...


class Channel(Protocol):
    def may_listen(self, root_id: str) -> bool:
        """Whether someone may read the run's deltas now (a cheap check, no I/O)."""

    def publish(self, root_id: str, delta: Delta) -> None: ...

    def subscribe(self, root_id: str) -> Subscription:
        """A subscription to the run's deltas, active when this returns."""


class _LocalSubscription:
    def __init__(self, channel: LocalChannel, root_id: str) -> None:
        self.channel = channel
        self.root_id = root_id
        self.queue: queue.SimpleQueue[Delta] = queue.SimpleQueue()

    def get(self, timeout: float) -> list[Delta]:
        found: list[Delta] = []
        try:
            found.append(self.queue.get(timeout=timeout) if timeout > 0
                         else self.queue.get_nowait())
            while True:
                found.append(self.queue.get_nowait())
        except queue.Empty:
            return found

    def close(self) -> None:
        self.channel._drop(self)


class LocalChannel:
    """Deltas handed to the subscribers in this process (threads share it)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._subscribers: dict[str, set[_LocalSubscription]] = {}

    def may_listen(self, root_id: str) -> bool:
        return bool(self._subscribers.get(root_id))

    def publish(self, root_id: str, delta: Delta) -> None:
        with self._lock:
            listeners = list(self._subscribers.get(root_id, ()))
        for subscription in listeners:
            subscription.queue.put(delta)

    def subscribe(self, root_id: str) -> Subscription:
        subscription = _LocalSubscription(self, root_id)
        with self._lock:
            self._subscribers.setdefault(root_id, set()).add(subscription)
        return subscription

    def _drop(self, subscription: _LocalSubscription) -> None:
        with self._lock:
            found = self._subscribers.get(subscription.root_id)
            if found is not None:
                found.discard(subscription)
                if not found:
                    del self._subscribers[subscription.root_id]


class _RedisSubscription:
    def __init__(self, client: Any, root_id: str) -> None:
        self.pubsub = client.pubsub()
        self.pubsub.subscribe(channel_name(root_id))
        # Active once Redis confirmed it: a delta published after this returns is received.
        deadline = time.monotonic() + REDIS_TIMEOUT
        while time.monotonic() < deadline:
            message = self.pubsub.get_message(timeout=deadline - time.monotonic())
            if message is not None and message.get("type") == "subscribe":
                return
        raise TimeoutError("Redis did not confirm the subscription to the run's deltas")

    def get(self, timeout: float) -> list[Delta]:
        found: list[Delta] = []
        wait = timeout
        while True:
            message = self.pubsub.get_message(timeout=wait)
            if message is None:
                return found
            wait = 0.0
            if message.get("type") == "message":
                delta = decode(message["data"])
                if delta is not None:
                    found.append(delta)

    def close(self) -> None:
        with contextlib.suppress(Exception):  # closing a broken connection
            self.pubsub.close()


class RedisChannel:
    """Deltas over Redis pub/sub (``client``: a ``redis.Redis``)."""

    def __init__(self, client: Any) -> None:
        self.client = client

    def may_listen(self, root_id: str) -> bool:
        return True  # a reader may be anywhere: a PUBLISH nobody hears costs one round trip

    def publish(self, root_id: str, delta: Delta) -> None:
        self.client.publish(channel_name(root_id), encode(delta))

    def subscribe(self, root_id: str) -> Subscription:
        return _RedisSubscription(self.client, root_id)

    @classmethod
    def from_url(cls, url: str) -> RedisChannel:
        import redis  # noqa: PLC0415 - the redis extra, needed only with a Redis channel

        return cls(redis.Redis.from_url(url, socket_timeout=REDIS_TIMEOUT,
                                        socket_connect_timeout=REDIS_TIMEOUT))


def clean_delta_channel(key: str, value: object) -> str | None:
    """None (the Celery broker when it is Redis, else this process) or a ``redis://`` /
    ``rediss://`` URL."""
    if value is None or (isinstance(value, str) and value.startswith(("redis://", "rediss://"))
                         and len(value.split("://", 1)[1]) > 0):
        return value
    raise InvalidSetting(SettingProblem(
        "turnkit.E027", key, f"TURNKIT[{key!r}] must be None or a redis:// URL; got {value!r}.",
        "For example 'redis://localhost:6379/1'; None sends deltas over the Celery broker when "
        "it is Redis, else only to readers in the process that runs the turn."))


__all__ = ["PREFIX", "Channel", "LocalChannel", "RedisChannel", "Subscription", "channel_name",
           "clean_delta_channel", "decode", "encode"]
