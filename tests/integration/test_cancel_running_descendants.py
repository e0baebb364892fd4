"""A cascade larger than one batch still stops the descendants that are running.

cancellation.md: one call changes at most a batch of descendants and leaves the rest to the
cancel sweep; those are never claimed, "so nothing of the tree runs after the cancel returns".
A descendant a worker is executing right now is not claimed again: only the cancel's fence
move stops it, so it must be among the turns the call itself cancels.
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.dispatch import background, override_turnkit
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import answering
from turnkit_django import Agent, services, tool
from turnkit_django.api.handles import Run
from turnkit_django.clients.protocol import ModelRequest
from turnkit_django.messages import TextPart
from turnkit_django.models import Message, Turn
from turnkit_django.testing import Entry, FunctionClient, call

__all__ = ["_disarm_failpoints", "background", "registered", "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

effects: list[str] = []


@tool
def ship_order(order_id: str) -> str:
    """Ship an order (a side effect)."""
    effects.append(order_id)
    return "shipped"


def test_a_running_descendant_past_the_batch_is_fenced_out_by_the_cancel(registered):
    effects.clear()
    root = Run.create(registered(answering("root")), "big").submit().row
    idle = [services.submit(services.new_turn(registered(answering(f"idle{i}")),
                                              [TextPart("wait")], parent=root))
            for i in range(3)]
    holder: dict[str, Any] = {}

    def respond(request: ModelRequest) -> Entry:
        if "report" not in holder:  # the operator cancels the tree while the model thinks
            with override_turnkit(MAINTENANCE_BATCH_SIZE=2):
                holder["report"] = services.cancel(root.pk, cascade=True)
        return call("ship_order", order_id="42")

    worker = registered(Agent("shipper", tools=[ship_order], client=FunctionClient(respond)))
    busy = services.submit(services.new_turn(worker, [TextPart("ship 42")], parent=root))
    services.run_turn(busy.pk)

    assert holder["report"].remaining  # the cascade was larger than one batch
    assert busy.pk in holder["report"].cancelled
    assert effects == []  # the tool never ran
    assert Turn.objects.get(pk=busy.pk).status == "cancelled"
    assert not Message.objects.filter(turn_id=busy.pk, role="assistant").exists()
    while services.cancel_sweep():
        pass
    assert {Turn.objects.get(pk=t.pk).status for t in idle} == {"cancelled"}
