"""A cascade cancel costs what it changes (issue 35): the tree walk reads narrow rows, the policy
is asked only about the turns the call cancels (the rest is the sweep's), and finished
descendants add no query however many there are."""

from __future__ import annotations

from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from tests.dispatch import background, override_turnkit
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.integration.test_cancel import child_of
from tests.orchestration import answering, policy, policy_calls
from turnkit_django import services
from turnkit_django.api.handles import Run
from turnkit_django.models import Turn

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

BATCH = 5


def big_tree(finished: int) -> tuple[Turn, list[Turn]]:
    """root → 3 active children, each with 9 active children (30 active descendants), and
    ``finished`` children of the root that a plain cancel finished (no cascade mark)."""
    root = Run.create(answering("root"), "big").submit().row
    active: list[Turn] = []
    for i in range(3):
        child = child_of(root, f"c{i}")
        active.append(child)
        active.extend(child_of(child, f"c{i}g{j}") for j in range(9))
    for i in range(finished):
        services.cancel(child_of(root, f"done{i}"))
    return root, active


def cancel_queries(root: Turn) -> tuple[Any, list[str]]:
    with override_turnkit(MAINTENANCE_BATCH_SIZE=BATCH), \
            policy("tests.orchestration.allow"), \
            CaptureQueriesContext(connection) as captured:
        report = services.cancel(root, cascade=True, principal={"user": 3})
    return report, [query["sql"] for query in captured.captured_queries]


def full_turn_reads_by_parent(queries: list[str]) -> list[str]:
    """SELECTs of whole turn rows (the ``error`` column is only read with the whole row) found
    through a parent link: the tree walk reading more than it needs."""
    table = Turn._meta.db_table
    return [sql for sql in queries if sql.lstrip().upper().startswith("SELECT")
            and f'"{table}"."error"' in sql and '"parent_turn_id" IN' in sql]


def test_a_large_cascade_asks_the_policy_only_about_the_turns_it_cancels(policy_calls):
    root, active = big_tree(finished=50)
    policy_calls.clear()
    report, queries = cancel_queries(root)

    asked = [resources["turn_id"] for action, _, resources in policy_calls if action == "cancel"]
    assert len(asked) <= BATCH + 1
    assert set(asked) == {root.pk, *report.cancelled}
    assert len(report.cancelled) == BATCH and report.remaining == len(active) - (BATCH - 1)
    assert full_turn_reads_by_parent(queries) == []

    # The sweep finishes the cascade the call started, without asking the policy.
    policy_calls.clear()
    with override_turnkit(MAINTENANCE_BATCH_SIZE=BATCH), policy("tests.orchestration.allow"):
        while services.cancel_sweep():
            pass
    assert {Turn.objects.get(pk=row.pk).status for row in active} == {"cancelled"}
    assert policy_calls == []


def test_finished_descendants_add_no_query_to_a_cascade():
    few, _ = big_tree(finished=2)
    _, with_few = cancel_queries(few)
    many, _ = big_tree(finished=50)
    _, with_many = cancel_queries(many)
    assert len(with_many) == len(with_few)
    while services.cancel_sweep():
        pass
