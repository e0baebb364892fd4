"""Warm shutdown: a worker that is asked to stop hands its turns back at a step boundary.

A background turn checks :func:`stopping` between steps (before a model call, before each tool
call): when set, it records nothing more, moves back to ``pending`` with its claim released
(tool calls whose intent this worker wrote but never started go back to ``pending`` too), rings
the doorbell, and returns, so another worker resumes it at once. The step in progress always
finishes: a tool that is running completes and its result is recorded. The backoff between two
attempts of a tool with retries is no step: it ends at the request (:func:`sleep`) and the turn
is handed back then, the call put back to ``pending`` with its attempt log (the next worker
waits what is left of the backoff).

The Celery integration (:mod:`turnkit_django.celery`) calls :func:`request_stop` on a warm
shutdown, and in prefork pool children on SIGTERM while a turn runs (systemd's default
``KillMode=control-group`` sends SIGTERM to the children too).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

_stop = threading.Event()
_lock = threading.Lock()
_running = 0
_POLL = 0.1  # how soon a sleeping turn sees a stop request, in seconds


def request_stop() -> None:
    """Ask every turn executing in this process to hand itself back at its next step boundary."""
    _stop.set()


def stopping() -> bool:
    return _stop.is_set()


def sleep(seconds: float) -> bool:
    """Sleep ``seconds``, ending early when a stop is requested; return whether one was.

    It polls the request rather than waiting on the event: a signal handler (the prefork child's
    SIGTERM) sets it on the very thread that sleeps, and ``Event.wait`` holding the event's lock
    at that moment would deadlock ``Event.set``.
    """
    deadline = time.monotonic() + seconds
    while not _stop.is_set():
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        time.sleep(min(left, _POLL))
    return True


def reset() -> None:
    """Forget a stop request (for tests, and for a process that goes on serving)."""
    _stop.clear()


@contextmanager
def executing() -> Iterator[None]:
    """Count a turn executing in this process while the block runs."""
    global _running
    with _lock:
        _running += 1
    try:
        yield
    finally:
        with _lock:
            _running -= 1


def busy() -> bool:
    """Whether a turn is executing in this process now."""
    with _lock:
        return _running > 0


__all__ = ["busy", "executing", "request_stop", "reset", "sleep", "stopping"]
