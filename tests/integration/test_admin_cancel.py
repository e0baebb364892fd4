"""Admin actions "Cancel" and "Cancel with descendants" (issue 4), through the Django test client.

The actions need the permission ``turnkit.cancel_turn`` and act with the staff user as principal.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from tests.dispatch import background
from tests.helpers import _disarm_failpoints, registered, verify_after_test
from tests.orchestration import answering, policy, policy_calls, snapshot
from turnkit_django import services
from turnkit_django.api.handles import Run
from turnkit_django.messages import TextPart
from turnkit_django.models import Turn

__all__ = ["_disarm_failpoints", "background", "policy_calls", "registered",
           "verify_after_test"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

CHANGELIST = "admin:turnkit_turn_changelist"


def staff(*codenames: str) -> Client:
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="turnkit",
                                                        codename__in=codenames))
    client = Client()
    client.force_login(user)
    return client


def family() -> tuple[Turn, Turn]:
    root = Run.create(answering("root"), "orchestrate").submit().row
    child = services.submit(services.new_turn(answering("child"), [TextPart("sub task")],
                                              parent=root))
    return root, child


def act(client: Client, action: str, *turns: Turn) -> Any:
    return client.post(reverse(CHANGELIST), {"action": action,
                                              "_selected_action": [t.pk for t in turns]},
                       follow=True)


def shown(response: Any) -> list[str]:
    return [str(m) for m in response.context["messages"]]


def status(turn: Turn) -> str:
    return Turn.objects.get(pk=turn.pk).status


def test_the_actions_are_offered_only_with_the_cancel_permission():
    with_permission = staff("view_turn", "cancel_turn")
    page = with_permission.get(reverse(CHANGELIST))
    assert page.status_code == 200
    assert {"cancel_turns", "cancel_turns_with_descendants"} <= {
        name for name, _ in page.context["action_form"].fields["action"].choices}
    User.objects.all().delete()
    without = staff("view_turn")
    page = without.get(reverse(CHANGELIST))
    assert page.status_code == 200
    # A read-only admin without the permission offers no action at all.
    assert page.context["action_form"] is None


def test_cancel_action_cancels_the_selected_turn_as_the_staff_user(policy_calls):
    root, child = family()
    client = staff("view_turn", "cancel_turn")
    with policy("tests.orchestration.allow"):
        response = act(client, "cancel_turns", root)
    assert response.status_code == 200
    assert shown(response) == ["1 turn was cancelled."]
    assert (status(root), status(child)) == ("cancelled", "pending")
    user = User.objects.get(username="operator")
    assert policy_calls[0][:2] == ("cancel", {"user": user.pk, "staff": True})
    assert Turn.objects.get(pk=root.pk).error["by"] == {"user": user.pk, "staff": True}
    (entry,) = LogEntry.objects.all()
    assert (entry.object_id, entry.user_id, entry.change_message) == (root.pk, user.pk,
                                                                      "Cancelled.")


def test_cancel_with_descendants_counts_every_cancelled_turn():
    root, child = family()
    other, other_child = family()
    response = act(staff("view_turn", "cancel_turn"), "cancel_turns_with_descendants", root,
                   other)
    assert shown(response) == ["4 turns were cancelled."]
    assert (status(root), status(child)) == ("cancelled", "cancelled")
    # One admin log entry per turn the action changed, with what happened to it.
    logged = dict(LogEntry.objects.filter(action_flag=CHANGE).values_list("object_id",
                                                                          "change_message"))
    assert logged == {
        root.pk: "Cancelled with descendants (2 turns cancelled).",
        child.pk: f"Cancelled with its ancestor turn {root.pk}.",
        other.pk: "Cancelled with descendants (2 turns cancelled).",
        other_child.pk: f"Cancelled with its ancestor turn {other.pk}.",
    }


def test_already_finished_turns_are_reported_not_changed():
    root, _ = family()
    services.cancel(root)
    response = act(staff("view_turn", "cancel_turn"), "cancel_turns", root)
    assert shown(response) == ["1 turn had already finished; nothing changed."]
    assert not LogEntry.objects.exists()


def test_without_the_permission_nothing_is_cancelled():
    root, child = family()
    before = snapshot()
    response = act(staff("view_turn"), "cancel_turns_with_descendants", root)
    assert response.status_code == 200
    assert snapshot() == before
    assert (status(root), status(child)) == ("pending", "pending")


def test_a_denied_cancel_is_reported_not_raised():
    root, _ = family()
    before = snapshot()
    with policy("tests.orchestration.deny"):
        response = act(staff("view_turn", "cancel_turn"), "cancel_turns_with_descendants", root)
    assert response.status_code == 200
    (message,) = shown(response)
    assert message == f"1 turn could not be cancelled: {root.pk} (not authorized)."
    assert snapshot() == before


def test_cancelling_the_descendants_of_a_finished_turn_logs_what_changed(registered):
    root, child = family()
    registered(answering("root"))  # the root's agent, as a worker process has it
    assert services.run_turn(root.pk, kind="test")
    assert (status(root), status(child)) == ("completed", "pending")
    act(staff("view_turn", "cancel_turn"), "cancel_turns_with_descendants", root)
    assert (status(root), status(child)) == ("completed", "cancelled")
    logged = dict(LogEntry.objects.filter(action_flag=CHANGE).values_list("object_id",
                                                                          "change_message"))
    # The finished turn's history says its descendants were cancelled, not that it was.
    assert logged == {
        root.pk: "Its descendants were cancelled (1 turn); the turn itself had already "
                 "finished.",
        child.pk: f"Cancelled with its ancestor turn {root.pk}.",
    }
