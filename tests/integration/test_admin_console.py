"""The turn page's cancel buttons, the permission matrix and the admin log, on PostgreSQL.

Buttons and actions share one permission (``turnkit.cancel_turn``), a confirmation page (GET
changes nothing), a CSRF-protected POST, the cancel service, and one ``LogEntry`` per turn
changed. Reading transcripts needs ``turnkit.view_transcript``, independently.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import CHANGE, LogEntry
from django.contrib.admin.utils import quote
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from tests.browser.scenario import active_tree, console_agents, finished_run
from tests.orchestration import policy, snapshot
from turnkit_django.models import Turn

__all__ = ["console_agents"]

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background", "console_agents")]

CANCEL = "admin:turnkit_turn_cancel"
CASCADE = "admin:turnkit_turn_cancel_descendants"


def operator(*codenames: str, csrf: bool = False) -> Client:
    user = User.objects.create_user(f"op-{len(User.objects.all())}", password="pw",
                                    is_staff=True)
    user.user_permissions.set(Permission.objects.filter(content_type__app_label="turnkit",
                                                        codename__in=codenames))
    client = Client(enforce_csrf_checks=csrf)
    client.force_login(user)
    return client


def statuses(run: Any) -> dict[str, str]:
    return dict(run.turns().values_list("agent_name", "status"))


def entries(turn_ids: Any) -> dict[str, str]:
    rows = LogEntry.objects.filter(object_id__in=list(turn_ids), action_flag=CHANGE)
    return dict(rows.values_list("object_id", "change_message"))


def test_buttons_show_only_with_the_permission_and_for_what_can_be_cancelled():
    tree = active_tree()
    page = reverse("admin:turnkit_turn_change", args=[tree.id])
    with_permission = operator("view_turn", "cancel_turn").get(page).content.decode()
    assert reverse(CANCEL, args=[quote(tree.id)]) in with_permission
    assert reverse(CASCADE, args=[quote(tree.id)]) in with_permission
    without = operator("view_turn", "view_transcript").get(page).content.decode()
    assert 'class="tk-cancel"' not in without
    done = finished_run()
    finished = operator("view_turn", "cancel_turn").get(
        reverse("admin:turnkit_turn_change", args=[done.id])).content.decode()
    assert 'class="tk-cancel"' not in finished  # nothing left to cancel


def test_the_confirmation_page_lists_what_will_be_cancelled_and_changes_nothing():
    tree = active_tree()
    before = snapshot()
    client = operator("view_turn", "cancel_turn")
    cascade = client.get(reverse(CASCADE, args=[tree.id]))
    assert cascade.status_code == 200
    body = cascade.content.decode()
    assert "This cancels 3 turns for good" in body and 'name="csrfmiddlewaretoken"' in body
    assert {t.pk for t in cascade.context["affected"]} == set(
        tree.turns().values_list("pk", flat=True))
    plain = client.get(reverse(CANCEL, args=[tree.id]))
    assert [t.pk for t in plain.context["affected"]] == [tree.id]
    assert snapshot() == before


def test_cancel_with_descendants_from_the_page_cancels_the_tree_and_logs_each_turn():
    tree = active_tree()
    client = operator("view_turn", "cancel_turn")
    response = client.post(reverse(CASCADE, args=[tree.id]), follow=True)
    assert response.redirect_chain[-1][0] == reverse("admin:turnkit_turn_change", args=[tree.id])
    assert [str(m) for m in response.context["messages"]] == ["3 turns were cancelled."]
    assert set(statuses(tree).values()) == {"cancelled"}
    user = User.objects.get(username__startswith="op-")
    assert Turn.objects.get(pk=tree.id).error["by"] == {"user": user.pk, "staff": True}
    logged = entries(tree.turns().values_list("pk", flat=True))
    assert logged.pop(tree.id) == "Cancelled with descendants (3 turns cancelled)."
    assert set(logged.values()) == {f"Cancelled with its ancestor turn {tree.id}."}
    assert len(logged) == 2
    assert set(LogEntry.objects.values_list("user_id", flat=True)) == {user.pk}
    # The History page of the turn shows the entry.
    history = client.get(reverse("admin:turnkit_turn_history", args=[tree.id]))
    assert "Cancelled with descendants" in history.content.decode()


def test_cancel_from_the_page_leaves_the_children_running():
    tree = active_tree()
    operator("view_turn", "cancel_turn").post(reverse(CANCEL, args=[tree.id]))
    assert statuses(tree) == {"console_dispatch": "cancelled", "console_charger": "running",
                              "console_writer": "pending"}
    assert entries([tree.id]) == {tree.id: "Cancelled."}
    assert LogEntry.objects.count() == 1


@pytest.mark.parametrize("view", [CANCEL, CASCADE])
@pytest.mark.parametrize("method", ["get", "post"])
def test_without_cancel_turn_the_buttons_urls_are_refused(view, method):
    tree = active_tree()
    before = snapshot()
    client = operator("view_turn", "view_transcript")
    response = getattr(client, method)(reverse(view, args=[tree.id]))
    assert response.status_code == 403
    assert snapshot() == before and not LogEntry.objects.exists()


def test_cancel_turn_without_view_turn_is_refused_too():
    tree = active_tree()
    response = operator("cancel_turn").post(reverse(CASCADE, args=[tree.id]))
    assert response.status_code == 403
    assert set(statuses(tree).values()) != {"cancelled"}


def test_a_post_without_the_csrf_token_is_refused():
    tree = active_tree()
    before = snapshot()
    response = operator("view_turn", "cancel_turn", csrf=True).post(
        reverse(CASCADE, args=[tree.id]))
    assert response.status_code == 403
    assert snapshot() == before


def test_a_denied_cancel_from_the_page_is_reported_and_not_logged():
    tree = active_tree()
    before = snapshot()
    with policy("tests.orchestration.deny"):
        response = operator("view_turn", "cancel_turn").post(reverse(CASCADE, args=[tree.id]),
                                                             follow=True)
    (message,) = [str(m) for m in response.context["messages"]]
    assert message == f"1 turn could not be cancelled: {tree.id} (not authorized)."
    assert snapshot() == before and not LogEntry.objects.exists()


def test_an_unknown_turn_is_a_404():
    response = operator("view_turn", "cancel_turn").get(reverse(CANCEL, args=["turn_nope"]))
    assert response.status_code == 404


@pytest.mark.parametrize(("codenames", "reads", "cancels"), [
    (("view_turn",), False, False),
    (("view_turn", "view_transcript"), True, False),
    (("view_turn", "cancel_turn"), False, True),
    (("view_turn", "view_transcript", "cancel_turn"), True, True),
])
def test_permission_matrix(codenames, reads, cancels):
    tree = active_tree()
    client = operator(*codenames)
    body = client.get(reverse("admin:turnkit_turn_change", args=[tree.id])).content.decode()
    assert ("Charge order 42 and send the receipt." in body) is reads
    assert ("acme" in body) is reads  # the principal
    assert ('class="tk-cancel"' in body) is cancels
    response = client.post(reverse(CASCADE, args=[tree.id]))
    assert (response.status_code == 302) is cancels
    assert (Turn.objects.get(pk=tree.id).status == "cancelled") is cancels
