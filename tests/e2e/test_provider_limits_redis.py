"""Provider limits counted in real Redis are shared by every process: two limiters with their
own Redis connections (as two workers have) never hold more slots together than the limit."""

from __future__ import annotations

import os
import threading
import time
import uuid

import pytest
import redis

from turnkit_django.base.throttles import Quota, RedisLimiter

pytestmark = pytest.mark.e2e


def test_two_workers_share_one_concurrency_limit_in_redis() -> None:
    url = os.environ["TURNKIT_TEST_REDIS_URL"]
    key = f"test-{uuid.uuid4().hex}"
    quota = Quota(concurrency=2)
    workers = [RedisLimiter(redis.Redis.from_url(url)) for _ in range(2)]
    inside, peak, calls, lock = [0], [0], [0], threading.Lock()

    def turn(limits: RedisLimiter) -> None:
        slot = uuid.uuid4().hex
        while not limits.try_acquire(key, quota, 0, slot, 60).granted:
            time.sleep(0.005)
        try:
            with lock:
                inside[0] += 1
                calls[0] += 1
                peak[0] = max(peak[0], inside[0])
            time.sleep(0.02)  # the model call
            with lock:
                inside[0] -= 1
        finally:
            limits.release(key, slot)

    threads = [threading.Thread(target=turn, args=(workers[i % 2],)) for i in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert calls[0] == 8 and peak[0] == 2
    assert workers[0].in_flight(key) == 0


def test_a_slot_of_a_dead_worker_expires_in_redis() -> None:
    url = os.environ["TURNKIT_TEST_REDIS_URL"]
    key, quota = f"test-{uuid.uuid4().hex}", Quota(concurrency=1, requests_per_minute=100)
    dead, alive = (RedisLimiter(redis.Redis.from_url(url)) for _ in range(2))
    assert dead.try_acquire(key, quota, 0, "dead", 0.2).granted  # never released
    assert alive.try_acquire(key, quota, 0, "alive", 60).wait is None
    deadline = time.monotonic() + 5
    while not alive.try_acquire(key, quota, 0, "alive", 60).granted:
        assert time.monotonic() < deadline
        time.sleep(0.05)
