"""Waiting for a run to settle: ``run.wait(timeout=)`` and ``await run.await_result(timeout=)``.

A run has settled once it is terminal or paused for a person (an approval, a pause, an inline
sub-agent that stopped): nothing more happens until someone acts. The caller polls the run's
row: each check is one short read after which the thread's connections are closed (returned to
the pool) by :func:`~turnkit_django.base.databases.unit`, so a waiting caller holds no database
session while it sleeps; the sleeps grow from 50 ms to 1 s. The timeout is the caller's, on
the monotonic clock (the database clock decides leases and deadlines, not how long a caller
waits). Inside ``transaction.atomic()`` ``wait()`` is refused: its reads would be the block's,
whose snapshot may never show the worker's commit, and it would hold the block's session the
whole time.
"""

from __future__ import annotations

import asyncio
import math
import time
from typing import Any

from asgiref.sync import sync_to_async

from ..base.databases import unit
from ..base.states import TERMINAL_TURN_STATUSES, TurnStatus
from ..exceptions import AtomicBlockError, InputError, RunTimeout
from ..models import Turn
from ..runtime import refuse_atomic_block
from ..store import reload

#: Statuses after which a run changes only when someone acts on it.
SETTLED_STATUSES = TERMINAL_TURN_STATUSES | {TurnStatus.PAUSED}
FIRST_DELAY = 0.05
MAX_DELAY = 1.0

# The clocks, as module attributes so tests can observe the sleeps.
sleep = time.sleep
async_sleep = asyncio.sleep


def _deadline(timeout: Any, operation: str) -> float:
    """The monotonic time at which to give up (infinity for ``None``)."""
    if timeout is None:
        return math.inf
    if isinstance(timeout, bool) or not isinstance(timeout, int | float) \
            or math.isnan(timeout) or timeout <= 0:
        raise InputError(f"{operation}: timeout must be a positive number of seconds, or None "
                         f"to wait without a limit; got {timeout!r}")
    return time.monotonic() + timeout


def _check(row: Turn) -> bool:
    """Read the run again (one short read; the connection is closed after it)."""
    unit(reload, row)
    return row.status in SETTLED_STATUSES


def _timed_out(row: Turn, timeout: float, deadline: float, delay: float) -> float:
    """The next sleep, or RunTimeout once the deadline has passed."""
    left = deadline - time.monotonic()
    if left <= 0:
        raise RunTimeout(row.pk, row.status, timeout)
    return min(delay, left)


def wait(row: Turn, timeout: float | None, operation: str = "run.wait()") -> Turn:
    """Block until ``row``'s run has settled; ``row`` refreshed, or RunTimeout."""
    deadline = _deadline(timeout, operation)
    refuse_atomic_block(operation, AtomicBlockError.FOLLOW, reason=AtomicBlockError.WAITS)
    delay = FIRST_DELAY
    while not _check(row):
        sleep(_timed_out(row, timeout or math.inf, deadline, delay))
        delay = min(delay * 2, MAX_DELAY)
    return row


async def await_result(row: Turn, timeout: float | None,
                       operation: str = "run.await_result()") -> Turn:
    """The same for async code: each check runs in a worker thread on a connection of its own,
    closed after it; the sleeps are ``asyncio.sleep``. No atomic block to refuse: async code
    has none of its own (Django refuses ATOMIC_REQUESTS for async views), and the checks'
    connections are never the caller's."""
    deadline = _deadline(timeout, operation)
    check = sync_to_async(_check, thread_sensitive=False)
    delay = FIRST_DELAY
    while not await check(row):
        await async_sleep(_timed_out(row, timeout or math.inf, deadline, delay))
        delay = min(delay * 2, MAX_DELAY)
    return row


__all__ = ["SETTLED_STATUSES", "await_result", "wait"]
