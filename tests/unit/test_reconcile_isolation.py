"""One turn that cannot be recovered never stops the recovery of the others (issue 10, item 1).

A failpoint makes the recovery of one turn raise, as a corrupted row or a bug would: the pass
logs it, counts it as a recovery attempt, goes on with the other turns, and dead-letters the bad
one once its attempts are used up. ``turnkit_reconcile --loop`` survives a failing pass.
"""

from __future__ import annotations

from datetime import timedelta
from io import StringIO

import pytest
from django.core.management import call_command

from tests.dispatch import override_turnkit
from tests.helpers import crash, expire_lease
from turnkit_django import Agent, reconcile
from turnkit_django.base import failpoints
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "invariants")]


class Poison(Exception):
    """What a recovery that cannot succeed raises."""


def poison() -> None:
    raise Poison("this turn cannot be recovered")


def abandoned(registered, count: int) -> list[str]:
    """Submitted turns whose worker died inside the model call, oldest first."""
    agent = registered(Agent("isolated", client=FunctionClient(lambda request: reply("ok"))))
    ids = []
    for index in range(count):
        run = agent.submit(f"task {index}")
        crash(run.id, "before_model_call")
        ids.append(run.id)
    return ids


def test_a_turn_whose_recovery_fails_is_counted_and_the_pass_goes_on(registered):
    bad, good = abandoned(registered, 2)
    expire_lease(bad, ago=timedelta(days=1))  # tried first: the oldest lease

    failpoints.arm("recover_turn", poison)
    report = reconcile()

    assert report.errors == [bad] and report.recovered == [good]
    assert "1 failed" in str(report)
    row = Turn.objects.get(pk=bad)
    assert (row.status, row.recovery_attempts) == ("running", 1)


def test_a_turn_that_keeps_failing_its_recovery_is_dead_lettered(registered):
    (bad,) = abandoned(registered, 1)
    with override_turnkit(MAX_RECOVERY_ATTEMPTS=2):
        for _ in range(3):
            failpoints.arm("recover_turn", poison)
            report = reconcile()
    assert report.dead_lettered == [bad]
    row = Turn.objects.get(pk=bad)
    assert row.status == "failed" and row.error["type"] == "DeadLetter"
    assert "this turn cannot be recovered" in row.error["message"]


def test_the_reconcile_loop_survives_a_failing_pass(registered):
    (turn_id,) = abandoned(registered, 1)
    failpoints.arm("reconcile_pass", poison)
    out, err = StringIO(), StringIO()
    call_command("turnkit_reconcile", "--loop", "--passes", "2", "--interval", "0.01",
                 stdout=out, stderr=err)
    assert "reconcile pass failed" in err.getvalue() and "Poison" in err.getvalue()
    assert "recovered 1" in out.getvalue()
    assert Turn.objects.get(pk=turn_id).status == "pending"
