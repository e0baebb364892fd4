"""Reading a run live: ``run.stream(after=, timeout=)`` and ``run.astream(...)``.

The stream yields the tree's durable :class:`~turnkit_django.models.Event` rows after the
cursor (as ``run.events()`` does) and, between them, the :class:`~turnkit_django.conf.deltas.Delta`
chunks the delta channel carries while a model call streams. It subscribes to the channel
BEFORE its first read of the events, so no delta published after that read is lost.

Each read is one short unit of database work after which the thread's connections are closed
(:func:`~turnkit_django.base.databases.unit`): nothing is held while the stream waits. Between reads
it waits on the channel, so a delta is handed on as it arrives; the reads are 50 ms apart at
first, up to 1 s while nothing happens.

Order: a delta received before a read comes before the events of that read. The deltas received
during a read come after its events, except those of a turn whose assistant ``message.created``
that read returned: that committed message supersedes them. A delta of an older fence than the
latest seen for its turn (a recovered turn streams its step again) is dropped. The stream ends
once the run is terminal or paused for a person and every event and delta was handed on;
RunTimeout after ``timeout`` seconds.
"""

from __future__ import annotations

import math
import time
from collections.abc import AsyncIterator, Generator, Iterable, Iterator

from asgiref.sync import sync_to_async

from ..base.databases import unit
from ..conf.delta_channel import Subscription
from ..conf.deltas import Delta
from ..exceptions import AtomicBlockError, RunTimeout
from ..models import Event, Turn
from ..runtime import refuse_atomic_block
from ..runtime.streaming import delta_channel
from ..store import reload
from .awaiting import FIRST_DELAY, MAX_DELAY, SETTLED_STATUSES, _deadline

#: Events read at most per read.
BATCH = 200
Item = Event | Delta


def read(row: Turn, after: int) -> tuple[list[Event], bool]:
    """The events after ``after`` (up to :data:`BATCH`) and whether the run had settled when
    they were read (its status is read first, so no event of a settled run is missed)."""
    reload(row)
    settled = row.status in SETTLED_STATUSES
    events = list(Event.objects.filter(root_turn_id=row.root_turn_id, id__gt=after)
                  .order_by("id")[:BATCH])
    return events, settled


class FenceFilter:
    """Drops the deltas of an older fence than the latest seen for their turn."""

    def __init__(self) -> None:
        self.latest: dict[str, int] = {}

    def __call__(self, deltas: Iterable[Delta], skip: set[str] | None = None) -> Iterator[Delta]:
        for delta in deltas:
            if skip and delta.turn_id in skip:
                continue
            latest = self.latest.get(delta.turn_id, delta.fence)
            if delta.fence < latest:
                continue
            self.latest[delta.turn_id] = delta.fence
            yield delta


def subscribe(root_id: str) -> Subscription | None:
    """The run's deltas from now on; None (logged) when the channel cannot be reached."""
    try:
        return delta_channel().subscribe(root_id)
    except Exception:  # no channel: the durable events alone
        import logging  # noqa: PLC0415 - only on this path

        logging.getLogger("turnkit_django.services").exception(
            "cannot subscribe to the deltas of run %s; streaming its events only", root_id)
        return None


def stream(row: Turn, after: int, timeout: float | None, *,
           operation: str = "run.stream()") -> Generator[Item, None, None]:
    """The run's events after ``after`` and its deltas, in order (module docstring); the
    arguments are checked now, the stream runs as it is iterated."""
    deadline = _deadline(timeout, operation)
    if operation == "run.stream()":  # async code has no atomic block of its own
        refuse_atomic_block(operation, AtomicBlockError.FOLLOW, reason=AtomicBlockError.WAITS)
    return _items(row, after, timeout, deadline)


def _items(row: Turn, after: int, timeout: float | None,
           deadline: float) -> Generator[Item, None, None]:
    subscription = subscribe(row.root_turn_id)
    fences = FenceFilter()
    delay = FIRST_DELAY
    try:
        while True:
            events, settled = unit(read, row, after)
            late = subscription.get(0) if subscription is not None else []
            yield from events
            committed = {e.turn_id for e in events if e.type == "message.created"
                         and (e.payload or {}).get("role") == "assistant"}
            yield from fences(late, committed)
            if events:
                after = events[-1].pk
            if settled and len(events) < BATCH:
                return
            delay = FIRST_DELAY if events or late else min(delay * 2, MAX_DELAY)
            next_read = time.monotonic() + delay
            while (left := next_read - time.monotonic()) > 0:
                if deadline - time.monotonic() <= 0:
                    raise RunTimeout(row.pk, row.status, timeout or math.inf)
                wait = min(left, deadline - time.monotonic())
                if subscription is None:
                    time.sleep(wait)
                    continue
                yield from fences(subscription.get(wait))
            if deadline - time.monotonic() <= 0:
                raise RunTimeout(row.pk, row.status, timeout or math.inf)
    finally:
        if subscription is not None:
            subscription.close()


_DONE = object()


def _next(items: Iterator[Item]) -> object:
    return next(items, _DONE)


async def astream(row: Turn, after: int, timeout: float | None) -> AsyncIterator[Item]:
    """:func:`stream` for async code: each step runs in a worker thread."""
    items = stream(row, after, timeout, operation="run.astream()")
    step = sync_to_async(_next, thread_sensitive=False)
    try:
        while (item := await step(items)) is not _DONE:
            yield item  # type: ignore[misc]  # an Event or a Delta
    finally:
        await sync_to_async(items.close, thread_sensitive=False)()


__all__ = ["FenceFilter", "astream", "read", "stream", "subscribe"]
