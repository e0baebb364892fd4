"""The heartbeat of a claimed turn: a thread that keeps its lease fresh while it executes."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

from django.db import close_old_connections, connection

from ..exceptions import LostClaim
from ..store import Claim, heartbeat

logger = logging.getLogger("turnkit_django.runtime")


class Heartbeat:
    """A thread that keeps the claim's heartbeat fresh; stops on LostClaim or exit, and when
    ``overdue()`` says the call in flight should no longer keep the turn alive (then the lease
    expires and reconcile treats the turn like a dead worker's)."""

    def __init__(self, claim: Claim, interval: float,
                 overdue: Callable[[], str | None] = lambda: None) -> None:
        self.claim = claim
        self.interval = interval
        self.overdue = overdue
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"turnkit-heartbeat-{claim.turn_id}",
                                        daemon=True)

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=max(self.interval, 1.0) * 2)

    def _run(self) -> None:
        try:
            while not self._stop.wait(self.interval):
                reason = self.overdue()
                if reason is not None:
                    logger.warning("turn %r: %s; its lease is no longer renewed",
                                   self.claim.turn_id, reason)
                    return
                try:
                    heartbeat(self.claim)
                except LostClaim:
                    return
                except Exception:
                    logger.exception("heartbeat failed for turn %r", self.claim.turn_id)
                    close_old_connections()
        finally:
            connection.close()


__all__ = ["Heartbeat"]
