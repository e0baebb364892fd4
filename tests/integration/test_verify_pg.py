"""The invariant checker on PostgreSQL: the unit tier's scenarios, re-collected here.

Real runs (a tool batch, a terminal tool, a sub-agent, a budget failure, a crash made stale by
reconcile) pass; corrupted rows fail; bulk history is checked with a bounded number of queries.
"""

from __future__ import annotations

import pytest
from django.conf import settings

from tests.helpers import _disarm_failpoints, invariants
from tests.unit.test_verify import (
    test_bulk_history_is_valid_and_checked_with_bounded_queries,
    test_command_reports_ok_and_fails_on_violations,
    test_crash_inside_tool_then_stale_repair_passes,
    test_duplicate_sequence_is_refused_by_the_database,
    test_passes_on_budget_failures,
    test_passes_on_tool_batch_terminal_tool_and_sub_agent,
    test_tool_call_without_result_is_detected,
    test_write_under_a_revoked_fence_is_detected,
)

__all__ = [
    "_disarm_failpoints",
    "invariants",
    "test_bulk_history_is_valid_and_checked_with_bounded_queries",
    "test_command_reports_ok_and_fails_on_violations",
    "test_crash_inside_tool_then_stale_repair_passes",
    "test_duplicate_sequence_is_refused_by_the_database",
    "test_passes_on_budget_failures",
    "test_passes_on_tool_batch_terminal_tool_and_sub_agent",
    "test_tool_call_without_result_is_detected",
    "test_write_under_a_revoked_fence_is_detected",
]

pytestmark = [
    pytest.mark.django_db,
    pytest.mark.skipif("postgresql" not in settings.DATABASES["default"]["ENGINE"],
                       reason="needs TURNKIT_TEST_DATABASE_URL (PostgreSQL)"),
]

