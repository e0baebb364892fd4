"""Admin actions "Approve" and "Deny" on tool calls awaiting approval (issue 15).

They need ``turnkit.decide_approval``, act with the staff user as principal, leave a LogEntry
per decided call, and hand an inline turn to background execution (a request never runs it).
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.test import Client
from django.urls import reverse

from tests.dispatch import recorded
from tests.integration.test_admin_cancel import staff
from tests.integration.test_controls import refund_agent, refunds
from turnkit_django import services
from turnkit_django.models import ToolExecution, Turn

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

CHANGELIST = "admin:turnkit_toolexecution_changelist"


def act(client: Client, action: str, *executions: ToolExecution) -> Any:
    return client.post(reverse(CHANGELIST), {"action": action,
                                              "_selected_action": [e.pk for e in executions]},
                       follow=True)


def test_an_operator_with_the_permission_approves_and_it_is_logged(
        registered, django_capture_on_commit_callbacks):
    run = refund_agent(registered, "admin-approve").run("refund")
    execution = ToolExecution.objects.awaiting_approval().get(turn_id=run.id)
    client = staff("view_toolexecution", "decide_approval")

    listed = client.get(reverse(CHANGELIST), {"approval": "awaiting"})
    assert execution.pk in listed.content.decode()
    with django_capture_on_commit_callbacks(execute=True):
        response = act(client, "approve_calls", execution)
    assert "1 call was decided" in response.content.decode()
    row = Turn.objects.get(pk=run.id)
    assert row.status == "pending" and row.submitted_at is not None  # handed to a worker
    assert run.id in recorded() and refunds == []
    assert services.run_turn(run.id) and refunds == [("42", 500)]
    entry = LogEntry.objects.get(object_id=execution.pk)
    assert entry.change_message == "Approved."
    assert ToolExecution.objects.get(pk=execution.pk).approval["by"]["staff"] is True


def test_without_the_permission_there_is_no_action_and_nothing_is_decided(registered):
    run = refund_agent(registered, "admin-deny").run("refund")
    execution = ToolExecution.objects.awaiting_approval().get(turn_id=run.id)
    client = staff("view_toolexecution")

    page = client.get(reverse(CHANGELIST)).content.decode()
    assert "approve_calls" not in page and "deny_calls" not in page
    act(client, "deny_calls", execution)
    assert ToolExecution.objects.get(pk=execution.pk).approval["state"] == "requested"
    assert not LogEntry.objects.exists()


def test_deny_from_the_admin_records_the_reason(registered):
    run = refund_agent(registered, "admin-denied").run("refund")
    execution = ToolExecution.objects.awaiting_approval().get(turn_id=run.id)
    act(staff("view_toolexecution", "decide_approval"), "deny_calls", execution)
    approval = ToolExecution.objects.get(pk=execution.pk).approval
    assert approval["state"] == "denied" and approval["reason"] == "denied in the admin"
    assert LogEntry.objects.get(object_id=execution.pk).change_message == "Denied."
