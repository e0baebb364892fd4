"""The transaction seen from above the store: work after the commit, and whether a block is open.

The runtime imports neither ``django.db`` nor the models (issue 36); what it needs of the
transaction it asks here: :func:`after_commit` runs a callback once the current transaction
commits (at once outside one; dropped on rollback), :func:`in_application_atomic_block` says
whether the caller opened an ``atomic()`` block (the one a test case wraps each test in does not
count).
"""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction


def after_commit(callback: Callable[[], object]) -> None:
    """Run ``callback`` once the current transaction commits (``transaction.on_commit``)."""
    transaction.on_commit(callback)


def in_application_atomic_block() -> bool:
    """Whether the default connection is inside an ``atomic()`` block other than a test
    case's (Django's durable blocks make the same exception)."""
    blocks = transaction.get_connection().atomic_blocks
    return bool(blocks) and not getattr(blocks[-1], "_from_testcase", False)


__all__ = ["after_commit", "in_application_atomic_block"]
