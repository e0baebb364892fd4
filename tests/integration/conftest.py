"""Integration tier: PostgreSQL (or SQLite where a feature claims SQLite support).

Every test that used the database is checked against the invariants afterwards
(``verify_after_test``); tests that corrupt data on purpose are marked ``corrupts_data``.
"""

from __future__ import annotations

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]
