"""Tenant 1 cancels its run with every descendant (P7), including a continuation its delivery
woke in the helpdesk's conversation: that turn acts for the helpdesk, but it is in tenant 1's
tree (it spends tenant 1's budget) and was caused by it, so the cascade is authorized for it as
the tree's (``turn_principal`` is the cancelled turn's principal)."""

from __future__ import annotations

import pytest

from tests.dispatch import clear, override_turnkit
from tests.helpers import run_all
from tests.unit.test_tenant_tree import DESK, POLICY, T1, asked, escalation
from turnkit_django import AuthorizationError, services
from turnkit_django.models import Turn

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def test_cascade_cancel_reaches_a_continuation_acting_for_another_principal(
        registered, django_capture_on_commit_callbacks):
    desk_conv, cust = escalation(registered)
    with override_turnkit(AUTHORIZATION_POLICY=POLICY):
        with django_capture_on_commit_callbacks(execute=True):
            run = cust.submit("escalate", principal=T1)
        clear()
        services.run_turn(run.id)  # the delivery wakes the helpdesk; its turn stays pending
        (cont,) = [t for t in desk_conv.turns() if t.root_turn_id == run.id]
        assert cont.status == "pending" and cont.principal == DESK

        with pytest.raises(AuthorizationError):
            run.cancel(cascade=True, principal=DESK)  # not the helpdesk's run
        with pytest.raises(AuthorizationError):
            services.cancel(cont.pk, principal=T1)  # nor tenant 1's turn, as a target
        assert Turn.objects.get(pk=cont.pk).status == "pending"

        asked.clear()
        run.cancel(cascade=True, principal=T1)
        cancels = {r["turn_id"]: r for a, r in asked if a == "cancel"}
        assert cancels[cont.pk]["turn_principal"] == T1  # authorized as the tree's
        assert Turn.objects.get(pk=cont.pk).status == "cancelled"
        assert Turn.objects.get(pk=cont.pk).error["cancelled_turn"] == run.id
        run_all(django_capture_on_commit_callbacks)
