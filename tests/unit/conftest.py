"""Unit tier fixtures (SQLite in memory).

Every test that used the database is checked against the invariants afterwards
(``verify_after_test``); tests that corrupt data on purpose are marked ``corrupts_data``.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from tests.dispatch import background
from tests.helpers import (
    _disarm_failpoints,
    invariants,
    media_root,
    registered,
    verify_after_test,
)
from turnkit_django.models import Message
from turnkit_django.testing import turnkit_dispatcher
from turnkit_django.testing.verify import assert_invariants

__all__ = ["_disarm_failpoints", "background", "invariants", "media_root", "registered",
           "turnkit_dispatcher", "valid_transcript", "verify_after_test"]


def check_transcript(conversation_id: str) -> list[tuple[str, str]]:
    """Assert the conversation keeps I1-I4 (valid transcript) and return its (role, kind) list."""
    assert_invariants(conversation_ids=[conversation_id])
    rows = Message.objects.filter(conversation_id=conversation_id).order_by("sequence")
    return list(rows.values_list("role", "kind"))


@pytest.fixture
def valid_transcript() -> Callable[[str], list[tuple[str, str]]]:
    """``valid_transcript(conversation_id)`` asserts I1-I4 and returns the (role, kind) list."""
    return check_transcript
