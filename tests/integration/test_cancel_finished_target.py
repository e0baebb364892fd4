"""A cascade cancel of a run that has already finished still stops what it left running.

orchestration.md: when a parent fails, the children it launched go on; "Cancel the run with
cascade=True to stop them at once". The finished target itself is not changed.
"""

from __future__ import annotations

import pytest

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import answering
from turnkit_django import load_turn, services
from turnkit_django.api.handles import Run
from turnkit_django.messages import TextPart
from turnkit_django.models import Turn

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def test_cascade_cancel_of_a_finished_run_cancels_its_active_descendants(registered):
    run = Run.create(registered(answering("root")), "launch").submit()
    launched = registered(answering("launched"))
    child = services.submit(services.new_turn(launched, [TextPart("long job")],
                                              parent=run.row, principal=run.row.principal))
    assert services.run_turn(run.id)
    assert run.refresh().status == "completed"

    assert load_turn(run.id).cancel().status == "completed"  # plain: nothing changes
    assert Turn.objects.get(pk=child.pk).status == "pending"

    report = services.cancel(run.id, cascade=True)
    assert report.cancelled == [child.pk] and report.status == "completed"
    assert Turn.objects.get(pk=child.pk).status == "cancelled"
    assert run.refresh().status == "completed"
    assert not services.run_turn(child.pk)  # its doorbell finds nothing to run
