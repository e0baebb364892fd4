"""Pausing a turn parked for approval, on PostgreSQL: the unit tier's scenarios, re-collected
here (the operator's pause outlives the decision; resume() of a parked turn nobody paused is
refused under the tree lock and changes nothing)."""

from __future__ import annotations

import pytest

from tests.helpers import invariants
from tests.unit.test_pause_parked_approval import (
    _empty_ledger,
    test_a_held_background_turn_is_dispatched_by_resume_not_by_the_approval,
    test_a_pause_on_a_parked_turn_holds_it_paused_through_the_decision,
    test_a_pause_requested_while_running_is_held_when_the_turn_parks,
    test_resume_before_the_decision_lifts_the_pause_and_the_turn_waits_for_it,
    test_resume_of_a_parked_turn_nobody_paused_is_refused_and_changes_nothing,
)

__all__ = [
    "_empty_ledger",
    "invariants",
    "test_a_held_background_turn_is_dispatched_by_resume_not_by_the_approval",
    "test_a_pause_on_a_parked_turn_holds_it_paused_through_the_decision",
    "test_a_pause_requested_while_running_is_held_when_the_turn_parks",
    "test_resume_before_the_decision_lifts_the_pause_and_the_turn_waits_for_it",
    "test_resume_of_a_parked_turn_nobody_paused_is_refused_and_changes_nothing",
]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]
