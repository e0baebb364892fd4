"""Django settings of the soak's worker processes: the e2e tier's, with slower maintenance.

* ``RECONCILE_INTERVAL`` 2 s (the e2e tier's is 1 s): maintenance re-rings every pending turn at
  the head of its lane once per interval, and on a 2-core machine shared with other work a
  worker gets through about one task a second, so with a dozen turns pending the 1 s interval
  rings faster than the fleet can answer and the broker queue grows without bound (see
  docs/guarantees.md, "Soak"). ``LEASE`` 5 s and ``HEARTBEAT_INTERVAL`` 0.5 s keep the system
  checks' ratios (``LEASE`` >= 3 heartbeats, ``RECONCILE_INTERVAL`` < ``LEASE``).
* ``MAX_RECOVERY_ATTEMPTS`` 5: under a fault every few seconds a long tree can lose its worker
  more often than the e2e tier's two attempts allow; a dead letter is a legitimate end, but the
  soak wants most turns to finish.
"""

from __future__ import annotations

from tests.e2e.worker_settings import *  # noqa: F403
from tests.e2e.worker_settings import E2E_TURNKIT

# Shared with the test process (tests/soak/conftest.py applies the same dict there).
SOAK_TURNKIT = {**E2E_TURNKIT, "HEARTBEAT_INTERVAL": 0.5, "LEASE": 5.0, "RECONCILE_INTERVAL": 2.0,
                "MAX_RECOVERY_ATTEMPTS": 5}
TURNKIT = SOAK_TURNKIT
