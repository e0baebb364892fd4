"""An inline sub-agent that stops for a person parks its parent, on PostgreSQL.

The same scenarios as ``tests/unit/test_inline_child_parked.py`` (SQLite): the tree lock is a
real row lock here, and a step is one guarded statement (store.steps), so the parent's park and
the chain's continuation take the paths a deployment takes.
"""

from __future__ import annotations

import pytest

from tests.helpers import invariants
from tests.unit.test_inline_child_parked import (
    _empty_ledger,
    test_a_cascading_pause_reaching_an_inline_child_pauses_the_chain,
    test_a_parked_call_in_an_inline_child_parks_its_parent,
    test_a_pause_of_the_parent_holds_the_chain_through_the_childs_approval,
    test_approving_the_childs_call_finishes_child_then_parent_once,
    test_cancelling_the_parent_closes_its_parked_childs_request,
    test_denying_the_childs_call_gives_the_parent_the_childs_answer,
    test_resuming_a_run_whose_inline_child_waits_for_approval_is_refused,
    test_resuming_the_run_alone_continues_its_paused_inline_child,
)

pytestmark = [pytest.mark.django_db]

__all__ = [
    "_empty_ledger",
    "invariants",
    "test_a_cascading_pause_reaching_an_inline_child_pauses_the_chain",
    "test_a_parked_call_in_an_inline_child_parks_its_parent",
    "test_a_pause_of_the_parent_holds_the_chain_through_the_childs_approval",
    "test_approving_the_childs_call_finishes_child_then_parent_once",
    "test_cancelling_the_parent_closes_its_parked_childs_request",
    "test_denying_the_childs_call_gives_the_parent_the_childs_answer",
    "test_resuming_a_run_whose_inline_child_waits_for_approval_is_refused",
    "test_resuming_the_run_alone_continues_its_paused_inline_child",
]
