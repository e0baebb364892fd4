"""Every model call of a turn, within the provider limits every worker shares.

``TURNKIT['PROVIDER_LIMITS']`` maps a client's ``provider`` (or ``provider:model``, which wins
over it) to a :class:`~turnkit_django.base.throttles.Quota`. :func:`complete` runs inside the turn's
``waiting_for`` (no database session held, the heartbeat running): it takes a concurrency slot
and a request (and an estimate of the input tokens, a character count over four) from the
limiter, waiting with a backoff while none is free, calls the model and frees the slot. A wait
that would pass the tree's deadline fails the turn as the deadline does (``BudgetExceeded``).

A provider's refusal for now (:class:`~turnkit_django.exceptions.ModelRateLimited`: 429,
overloaded) is waited out for the ``Retry-After`` it gave (with jitter; a backoff when it gave
none) and the same request sent again, up to :data:`RATE_LIMITED_RETRIES` times; each retry
emits ``model.rate_limited``. Other errors pass unchanged.

A wait for a slot (``model.waiting_for_slot``) or after a refusal marks the turn's lease while it
lasts (:mod:`~turnkit_django.store.provider_waits`): one short write as it starts, one as the
request goes out, each outside any transaction and the session handed back before sleeping.

The counts live in Redis when ``TURNKIT['LIMITS_REDIS_URL']`` (or else the Celery broker) is a
Redis URL, else in this process.
"""

from __future__ import annotations

import random
import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

from django.core.signals import setting_changed

from ..base.throttles import Limiter, LocalLimiter, Quota, RedisLimiter
from ..clients import ModelRequest, ModelResponse
from ..conf import turnkit_settings
from ..exceptions import BudgetExceeded, ModelRateLimited
from ..observability import metrics
from ..store import provider_waits, release_session
from ..store.limits import TIMEOUT
from .context import TurnContext
from .streaming import model_call

#: How many times one request is sent again after the provider refused it for now.
RATE_LIMITED_RETRIES = 10
#: Polling a full concurrency limit: the first wait and the longest, in seconds.
SLOT_BACKOFF = (0.01, 1.0)
#: Waits for a refusal without Retry-After: the first and the longest, in seconds.
RETRY_BACKOFF = (1.0, 60.0)

_lock = threading.Lock()
_limiters: dict[str | None, Limiter] = {}


def redis_url() -> str | None:
    """Where the counts are kept: LIMITS_REDIS_URL, else the Celery broker when it is Redis,
    else None (this process)."""
    if turnkit_settings.LIMITS_REDIS_URL:
        return turnkit_settings.LIMITS_REDIS_URL
    try:
        from celery import current_app  # noqa: PLC0415 - optional, read on first use
    except ImportError:
        return None
    broker = str(current_app.conf.broker_url or "")
    return broker if broker.startswith(("redis://", "rediss://")) else None


def limiter() -> Limiter:
    """The limiter of this process (one per Redis URL; a shared in-process one without)."""
    url = redis_url()
    with _lock:
        found = _limiters.get(url)
        if found is None:
            found = _limiters[url] = LocalLimiter() if url is None else _redis_limiter(url)
        return found


def _redis_limiter(url: str) -> Limiter:
    import redis  # noqa: PLC0415 - the redis extra, needed only with Redis limits

    return RedisLimiter(redis.Redis.from_url(url))


def quota_for(provider: str, model: str) -> tuple[str, Quota] | None:
    """The limits entry that applies to ``model`` of ``provider`` and its name, or None."""
    limits = turnkit_settings.PROVIDER_LIMITS
    for key in (f"{provider}:{model}", provider):
        if key in limits:
            return key, Quota(**limits[key])
    return None


def estimate_tokens(request: ModelRequest) -> int:
    """A cheap estimate of a request's input tokens: its characters over four."""
    size = len(request.instructions) + sum(len(repr(m.parts)) for m in request.messages)
    return size // 4 + 1


def complete(ctx: TurnContext, request: ModelRequest) -> ModelResponse:
    """``ctx.client.complete(request)`` within the provider's limits, a refusal for now waited
    out and retried; call inside ``ctx.waiting_for``."""
    deadline = _deadline(ctx)
    call = model_call(ctx.client, ctx.deltas)  # streamed to on_delta= where it can be
    retries = 0
    waits = _Waits(ctx, request)
    try:
        while True:
            with _slot(ctx, request, deadline, waits):
                try:
                    return call(request)
                except ModelRateLimited as exc:
                    refused = exc
            retries += 1
            if retries > RATE_LIMITED_RETRIES:
                raise refused
            first, longest = RETRY_BACKOFF
            wait = (refused.retry_after if refused.retry_after is not None
                    else min(first * 2 ** (retries - 1), longest))
            wait *= 1 + random.uniform(0, 0.2)  # noqa: S311 - jitter, not a secret
            waits.start()
            ctx.emit("model.rate_limited", model=request.model, attempt=retries,
                     wait=round(wait, 3), status=refused.status, limit=waits.on)
            _sleep(wait, deadline)
    finally:
        waits.end()


class _Waits:
    """Marks the turn as waiting on its provider limit (one write when a wait starts, one when
    the request goes out; none for a call that never waits), the session handed back after."""

    def __init__(self, ctx: TurnContext, request: ModelRequest) -> None:
        self.ctx = ctx
        provider = str(getattr(ctx.client, "provider", "custom"))
        entry = quota_for(provider, request.model)
        self.on = provider if entry is None else entry[0]
        self.model = request.model
        self.marked = False

    def start(self) -> None:
        if not self.marked:
            self.marked = True
            metrics.slot_wait(self.on, 1)
            provider_waits.wait_started(self.ctx.claim, self.on)
            release_session()

    def end(self) -> None:
        if self.marked:
            self.marked = False
            metrics.slot_wait(self.on, -1)
            provider_waits.wait_ended(self.ctx.claim)
            release_session()


def _deadline(ctx: TurnContext) -> float | None:
    """The tree's deadline on this process's monotonic clock (None: none)."""
    deadline, now = ctx.row.deadline_at, ctx.fenced.database_now()
    if deadline is None or now is None:
        return None
    return time.monotonic() + (deadline - now).total_seconds()


def _sleep(seconds: float, deadline: float | None) -> None:
    """Sleep ``seconds``, or fail the turn as its deadline does when that would pass it."""
    if deadline is not None and time.monotonic() + seconds >= deadline:
        raise BudgetExceeded(TIMEOUT, limit="timeout")
    time.sleep(seconds)


@contextmanager
def _slot(ctx: TurnContext, request: ModelRequest, deadline: float | None,
          waits: _Waits) -> Iterator[None]:
    """Hold a slot of the request's provider limits (none configured: nothing to hold)."""
    provider = str(getattr(ctx.client, "provider", "custom"))
    entry = quota_for(provider, request.model)
    if entry is None:
        waits.end()
        yield
        return
    key, quota = entry
    tokens = estimate_tokens(request) if quota.input_tokens_per_minute else 0
    slot, ttl = uuid.uuid4().hex, (turnkit_settings.MODEL_TIMEOUT or 900) + turnkit_settings.LEASE
    chosen = limiter()
    backoff = SLOT_BACKOFF[0]
    while not (answer := chosen.try_acquire(key, quota, tokens, slot, ttl)).granted:
        if answer.wait is None:
            wait, backoff = backoff * random.uniform(0.5, 1.5), min(backoff * 2, SLOT_BACKOFF[1])  # noqa: S311
        else:
            wait = answer.wait + random.uniform(0, 0.05)  # noqa: S311 - spread a new minute
        if not waits.marked:
            waits.start()
            ctx.emit("model.waiting_for_slot", model=request.model, limit=key)
        _sleep(wait, deadline)
    waits.end()
    if ctx.in_flight is not None:  # MODEL_TIMEOUT counts the call, not the wait for a slot
        ctx.in_flight = replace(ctx.in_flight, started=time.monotonic())
    try:
        yield
    finally:
        chosen.release(key, slot)


def _reset(*, setting: str, **kwargs: Any) -> None:
    if setting in ("TURNKIT", "CELERY_BROKER_URL"):
        with _lock:
            _limiters.clear()


setting_changed.connect(_reset)

__all__ = ["RATE_LIMITED_RETRIES", "complete", "estimate_tokens", "limiter", "quota_for",
           "redis_url"]
