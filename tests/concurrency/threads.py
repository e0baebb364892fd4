"""Threads for concurrency tests: each runs with its own database connection and closes it.

No sleeps: threads are released together by barriers, blocked code waits on events, and
``wait_until`` polls a condition with a deadline.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connection

TIMEOUT = 30.0


class Worker(threading.Thread):
    """Run ``target(*args, **kwargs)`` in a thread with its own connection; keep the outcome."""

    def __init__(self, target: Callable[..., Any], *args: Any, **kwargs: Any) -> None:
        super().__init__(daemon=True, name=f"worker-{getattr(target, '__name__', 'task')}")
        self._call = (target, args, kwargs)
        self.result: Any = None
        self.error: BaseException | None = None

    def run(self) -> None:
        target, args, kwargs = self._call
        try:
            self.result = target(*args, **kwargs)
        except BaseException as exc:  # reported by outcome()
            self.error = exc
        finally:
            connection.close()

    def outcome(self, timeout: float = TIMEOUT) -> Any:
        """Wait for the thread; return its result or raise its exception."""
        self.join(timeout)
        assert not self.is_alive(), f"{self.name} did not finish within {timeout}s"
        if self.error is not None:
            raise self.error
        return self.result


class Race:
    """``size`` long-lived threads (one connection each) released together once per round."""

    def __init__(self, size: int, timeout: float = TIMEOUT) -> None:
        self.size = size
        self.timeout = timeout
        self._start = threading.Barrier(size + 1, timeout=timeout)
        self._end = threading.Barrier(size + 1, timeout=timeout)
        self._tasks: list[Callable[[], Any] | None] = [None] * size
        self._results: list[Any] = [None] * size
        self._errors: list[BaseException | None] = [None] * size
        self._threads = [threading.Thread(target=self._loop, args=(i,), daemon=True,
                                          name=f"racer-{i}") for i in range(size)]
        for thread in self._threads:
            thread.start()

    def _loop(self, index: int) -> None:
        try:
            while True:
                self._start.wait()
                task = self._tasks[index]
                if task is None:
                    return
                try:
                    self._results[index] = task()
                except Exception as exc:  # reported by round()
                    self._errors[index] = exc
                self._end.wait()
        except threading.BrokenBarrierError:
            return
        finally:
            connection.close()

    def round(self, tasks: Sequence[Callable[[], Any]]) -> list[Any]:
        """Release every racer on its task at once; return their results in order."""
        assert len(tasks) == self.size
        self._tasks = list(tasks)
        self._results = [None] * self.size
        self._errors = [None] * self.size
        self._start.wait()
        self._end.wait()
        for error in self._errors:
            if error is not None:
                raise error
        return list(self._results)

    def close(self) -> None:
        self._tasks = [None] * self.size
        try:
            self._start.wait()
        except threading.BrokenBarrierError:
            pass
        for thread in self._threads:
            thread.join(self.timeout)

    def __enter__(self) -> Race:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def wait_until(condition: Callable[[], Any], timeout: float = TIMEOUT, what: str = "") -> Any:
    """Poll ``condition`` until it returns something truthy; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        assert time.monotonic() < deadline, f"timed out waiting for {what or condition}"
        time.sleep(0.01)
