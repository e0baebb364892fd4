"""An application's completion callback starts a new root (docs/howto/messages-and-waits.md).

``worker.submit(task, callback=conversation)`` is application code asking to hear how a job
ended: the listener's continuation must be able to react to a job that failed on its budget, so
it starts its own tree with the listener agent's limits instead of joining the worker's
exhausted ledger. A callback a model asked for (``launch_agent(callback=True)``) still joins
the tree (tests/integration/test_continuation_chains.py).
"""

from __future__ import annotations

import pytest

from tests.helpers import run_all
from turnkit_django import Agent
from turnkit_django.models import Turn
from turnkit_django.store.limits import ITERATIONS
from turnkit_django.testing import FunctionClient, call, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def test_a_callback_of_a_failed_job_starts_its_own_root(registered,
                                                         django_capture_on_commit_callbacks):
    worker = registered(Agent("looper", max_iterations=2,
                              client=FunctionClient(lambda request: call("nothing"))))
    listener = registered(Agent("listener", max_iterations=3, client=FunctionClient(
        lambda request: reply("got the callback"))))
    conversation = listener.conversation(principal={"u": 1})
    with django_capture_on_commit_callbacks(execute=True):
        run = worker.submit("loop forever", callback=conversation)
    run_all(django_capture_on_commit_callbacks)

    job = Turn.objects.get(pk=run.id)
    assert (job.status, job.error["reason"]) == ("failed", ITERATIONS)
    (continuation,) = conversation.turns()
    assert continuation.status == "completed", continuation.error
    assert continuation.output_text == "got the callback"
    assert continuation.root_turn_id == continuation.pk  # not the worker's tree
    assert continuation.options["limits"]["max_iterations"] == 3  # the listener's own
    assert continuation.options["woken_by"]["delivery_id"]
    assert job.tree_iterations == 2  # the worker's ledger was not charged for the listener
