"""Pruning a conversation never deletes turns of other conversations (issue 35, H7; SQLite)."""

from __future__ import annotations

from typing import Any

import pytest

from tests.retention import (
    a_pending_reply_keeps_the_sender_from_being_pruned,
    pruning_the_sender_keeps_the_reply_in_the_other_conversation,
)

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def test_pruning_the_sender_keeps_the_reply_it_woke_in_another_conversation(registered: Any):
    pruning_the_sender_keeps_the_reply_in_the_other_conversation(registered)


def test_a_pending_reply_in_another_conversation_keeps_the_sender(registered: Any):
    a_pending_reply_keeps_the_sender_from_being_pruned(registered)
