"""The in-memory dispatcher: submitted turns kept in memory and run in the test process.

``InMemoryDispatcher`` is a ``TURNKIT["DISPATCHER"]`` that remembers turn ids instead of sending
Celery messages; ``in_memory_dispatcher`` is the shared instance and ``turnkit_dispatcher`` the
pytest fixture that installs it for one test. All three are importable from
:mod:`turnkit_django.testing`.
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator

from django.conf import settings
from django.test import TestCase, override_settings
from django.utils.module_loading import import_string

try:  # optional: the fixture exists where pytest does
    import pytest
except ImportError:  # pragma: no cover - pytest is not installed in production
    pytest = None  # type: ignore[assignment]

#: What a Celery worker runs for a doorbell; resolved on use (it needs Django's app registry).
WORKER_ENTRY = "turnkit_django.services.run_turn"


class InMemoryDispatcher:
    """A ``TURNKIT["DISPATCHER"]`` that remembers turn ids instead of sending Celery messages.

    Every doorbell (``submit()``, ``reconcile()``, maintenance) appends the turn id; tests read
    :meth:`dispatched` and run the turns in their own process with :meth:`run_dispatched`.
    Thread-safe. Use the module's :data:`in_memory_dispatcher` (import path
    ``"turnkit_django.testing.in_memory_dispatcher"``) or the ``turnkit_dispatcher`` fixture.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._turn_ids: list[str] = []

    def __call__(self, turn_id: str) -> None:
        with self._lock:
            self._turn_ids.append(turn_id)

    def dispatched(self) -> list[str]:
        """Every turn id dispatched since the last :meth:`clear`, in order (repeats included)."""
        with self._lock:
            return list(self._turn_ids)

    def clear(self) -> None:
        """Forget what was dispatched."""
        with self._lock:
            self._turn_ids.clear()

    def run_dispatched(self, *, limit: int = 100) -> list[str]:
        """Run the dispatched turns here, as a worker would, until no doorbell is left.

        Turns dispatched while running (the next turn of a conversation, a released waiter, a
        parent whose children finished) are run too, also inside a test's transaction (their
        on-commit callbacks are executed). Returns the ids rung, in order; a turn that
        is not claimable (already finished, or not its lane's turn) is skipped, as in a worker.
        Raises ``RuntimeError`` after ``limit`` doorbells, which means the turns keep ringing.
        """
        run = import_string(WORKER_ENTRY)
        rung: list[str] = []
        while True:
            with self._lock:
                if not self._turn_ids:
                    return rung
                turn_id = self._turn_ids.pop(0)
            if len(rung) >= limit:
                raise RuntimeError(f"more than {limit} doorbells; the turns keep re-dispatching")
            rung.append(turn_id)
            # Inside a test's transaction nothing commits: run the turn's on-commit work (its
            # events, the doorbells it rings) at once, as it would run in a worker.
            with TestCase.captureOnCommitCallbacks(execute=True):
                run(turn_id)

    @contextlib.contextmanager
    def installed(self, **turnkit: object) -> Iterator[InMemoryDispatcher]:
        """Use this dispatcher (and the other ``TURNKIT`` keys given) inside the block."""
        current = getattr(settings, "TURNKIT", None) or {}
        self.clear()
        try:
            with override_settings(TURNKIT={**current, **turnkit, "DISPATCHER": self}):
                yield self
        finally:
            self.clear()


#: The shared instance: ``TURNKIT["DISPATCHER"] = "turnkit_django.testing.in_memory_dispatcher"``.
in_memory_dispatcher = InMemoryDispatcher()

if pytest is not None:

    @pytest.fixture
    def turnkit_dispatcher() -> Iterator[InMemoryDispatcher]:
        """Dispatch submitted turns into memory for one test; import it in your conftest.py."""
        with in_memory_dispatcher.installed() as dispatcher:
            yield dispatcher


__all__ = ["WORKER_ENTRY", "InMemoryDispatcher", "in_memory_dispatcher"]
if pytest is not None:
    __all__ += ["turnkit_dispatcher"]
