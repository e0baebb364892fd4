"""Concurrency tier: PostgreSQL, ``transaction=True`` tests, threads with their own connections.

Every test here is checked against the invariants (I1-I4, I6, I7) after it ran
(``verify_after_test``).
"""

from __future__ import annotations

import pytest
from django.db import connection

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, media_root, registered, verify_after_test

__all__ = ["_disarm_failpoints", "_postgresql_only", "background", "media_root", "registered",
           "verify_after_test"]


@pytest.fixture(autouse=True)
def _postgresql_only() -> None:
    if connection.vendor != "postgresql":
        pytest.skip("the concurrency tier needs PostgreSQL: set TURNKIT_TEST_DATABASE_URL")
