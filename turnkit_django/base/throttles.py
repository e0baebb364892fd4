"""Counters of provider limits shared by the processes that call one provider.

A :class:`Quota` is what one ``PROVIDER_LIMITS`` entry allows: calls in flight at once
(``concurrency``), requests and estimated input tokens per minute. A limiter answers
``try_acquire``: granted (and, under a concurrency limit, a slot held until ``release``), or not
yet, with how long to wait before asking again. Nothing here waits or reads settings; the
runtime (:mod:`turnkit_django.runtime.throttling`) does both.

- :class:`LocalLimiter` counts in this process (threads share it): the embedded default and
  tests.
- :class:`RedisLimiter` counts in Redis, so every worker process and machine shares one count.
  A slot is a member of a sorted set scored by its expiry: a worker that dies holding one frees
  it once the slot's time to live passes. Rates are counted per minute of the Redis clock.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

WINDOW = 60.0  # seconds: requests and input tokens are counted per minute


@dataclass(frozen=True)
class Quota:
    """What one ``PROVIDER_LIMITS`` entry allows (None: no limit of that kind)."""

    concurrency: int | None = None
    requests_per_minute: int | None = None
    input_tokens_per_minute: int | None = None


@dataclass(frozen=True)
class Answer:
    """A limiter's answer: ``granted``, else ``wait`` seconds before asking again (None: a
    concurrency slot must free first, so poll with a backoff)."""

    granted: bool
    wait: float | None = None


GRANTED = Answer(True)


class Limiter(Protocol):
    def try_acquire(self, key: str, quota: Quota, tokens: int, slot: str,
                    ttl: float) -> Answer: ...

    def release(self, key: str, slot: str) -> None: ...


@dataclass
class _Counts:
    slots: dict[str, float] = field(default_factory=dict)  # slot -> expiry
    window: int = -1
    requests: int = 0
    tokens: int = 0


class LocalLimiter:
    """Limits counted in this process; ``clock`` (seconds, like ``time.time``) for tests."""

    def __init__(self, clock: Callable[[], float] = time.time) -> None:
        self.clock = clock
        self._lock = threading.Lock()
        self._counts: dict[str, _Counts] = {}

    def try_acquire(self, key: str, quota: Quota, tokens: int, slot: str,
                    ttl: float) -> Answer:
        with self._lock:
            now = self.clock()
            counts = self._counts.setdefault(key, _Counts())
            counts.slots = {s: t for s, t in counts.slots.items() if t > now}
            if quota.concurrency is not None and len(counts.slots) >= quota.concurrency:
                return Answer(False)
            window = math.floor(now / WINDOW)
            if window != counts.window:
                counts.window, counts.requests, counts.tokens = window, 0, 0
            rest = (window + 1) * WINDOW - now
            rpm, itpm = quota.requests_per_minute, quota.input_tokens_per_minute
            if rpm is not None and counts.requests + 1 > rpm:
                return Answer(False, rest)
            # A request larger than the whole budget goes alone, into an empty minute.
            if itpm is not None and counts.tokens and counts.tokens + tokens > itpm:
                return Answer(False, rest)
            counts.requests += 1
            counts.tokens += tokens
            if quota.concurrency is not None:
                counts.slots[slot] = now + ttl
            return GRANTED

    def release(self, key: str, slot: str) -> None:
        with self._lock:
            counts = self._counts.get(key)
            if counts is not None:
                counts.slots.pop(slot, None)

    def in_flight(self, key: str) -> int:
        """Slots held now under ``key`` (for tests and inspection)."""
        with self._lock:
            now = self.clock()
            counts = self._counts.get(key)
            return 0 if counts is None else sum(1 for t in counts.slots.values() if t > now)


# KEYS: slots (sorted set), requests counter prefix, tokens counter prefix.
# ARGV: concurrency, requests per minute, tokens per minute (0: none), tokens, slot, ttl.
# Returns {1} when granted, else {0, wait} (wait "-1": a slot must free first).
_ACQUIRE = """
local clock = redis.call('TIME')
local now = tonumber(clock[1]) + tonumber(clock[2]) / 1000000
local conc, rpm, itpm = tonumber(ARGV[1]), tonumber(ARGV[2]), tonumber(ARGV[3])
local tokens, ttl = tonumber(ARGV[4]), tonumber(ARGV[6])
if conc > 0 then
  redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
  if redis.call('ZCARD', KEYS[1]) >= conc then return {0, '-1'} end
end
local window = math.floor(now / 60)
local rest = tostring((window + 1) * 60 - now)
local requests, used = KEYS[2] .. window, KEYS[3] .. window
if rpm > 0 and tonumber(redis.call('GET', requests) or '0') + 1 > rpm then
  return {0, rest}
end
if itpm > 0 then
  local spent = tonumber(redis.call('GET', used) or '0')
  if spent > 0 and spent + tokens > itpm then return {0, rest} end
end
if rpm > 0 then
  redis.call('INCR', requests)
  redis.call('EXPIRE', requests, 120)
end
if itpm > 0 then
  redis.call('INCRBY', used, tokens)
  redis.call('EXPIRE', used, 120)
end
if conc > 0 then
  redis.call('ZADD', KEYS[1], now + ttl, ARGV[5])
  redis.call('EXPIRE', KEYS[1], math.ceil(ttl) + 60)
end
return {1}
"""


class RedisLimiter:
    """Limits counted in Redis (``client``: a ``redis.Redis``), shared by every process."""

    def __init__(self, client: Any, prefix: str = "turnkit:limits") -> None:
        self.client = client
        self.prefix = prefix
        self._acquire = client.register_script(_ACQUIRE)

    def _keys(self, key: str) -> list[str]:
        base = f"{self.prefix}:{{{key}}}"  # one hash slot per key (Redis Cluster)
        return [f"{base}:slots", f"{base}:requests:", f"{base}:tokens:"]

    def try_acquire(self, key: str, quota: Quota, tokens: int, slot: str,
                    ttl: float) -> Answer:
        result = self._acquire(keys=self._keys(key), args=[
            quota.concurrency or 0, quota.requests_per_minute or 0,
            quota.input_tokens_per_minute or 0, tokens, slot, ttl])
        if int(result[0]) == 1:
            return GRANTED
        wait = float(result[1])
        return Answer(False, None if wait < 0 else wait)

    def release(self, key: str, slot: str) -> None:
        self.client.zrem(self._keys(key)[0], slot)

    def in_flight(self, key: str) -> int:
        """Slots held now under ``key`` (expired ones included until the next acquire)."""
        return int(self.client.zcard(self._keys(key)[0]))


__all__ = ["GRANTED", "WINDOW", "Answer", "Limiter", "LocalLimiter", "Quota", "RedisLimiter"]
