"""Approving and denying parked tool calls from the admin.

The actions call :func:`turnkit_django.services.approvals.decide` with the staff user as
principal (authorized as ``approve``/``deny`` by the policy), need the permission
``turnkit.decide_approval``, and leave one ``LogEntry`` per call they decided. An inline turn
decided here continues in the background (it is submitted): a web request never runs a turn.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext as _
from django.utils.translation import gettext_lazy, ngettext

from ..console.admin_views import operator_principal
from ..exceptions import AuthorizationError, TurnkitError
from ..models import ToolExecution, Turn
from ..services import submit
from ..services.approvals import decide

DECIDE_PERMISSION = "turnkit.decide_approval"


class AwaitingApprovalFilter(admin.SimpleListFilter):
    title = gettext_lazy("approval")
    parameter_name = "approval"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Any:
        return [("awaiting", gettext_lazy("awaiting approval"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "awaiting":
            return queryset.filter(pk__in=ToolExecution.objects.awaiting_approval().values("pk"))
        return queryset


def decide_calls(request: HttpRequest, queryset: QuerySet[ToolExecution], state: str) -> None:
    """Approve (``state="approved"``) or deny each call as the staff user; log and report."""
    decided, refused = 0, []
    user_id: Any = request.user.pk
    for execution in queryset.select_related("turn"):
        try:
            decision = decide(execution.turn.root_turn_id, execution.pk, state,
                              principal=operator_principal(request),
                              reason=_("denied in the admin") if state == "denied" else "")
        except AuthorizationError:
            refused.append(_("%(call)s (not authorized)") % {"call": execution.tool_call_id})
            continue
        except TurnkitError as exc:
            refused.append(f"{execution.tool_call_id} ({exc})")
            continue
        if decision.execute_inline:  # a web request never runs the turn itself
            submit(Turn.objects.get(pk=execution.turn_id))
        if decision.changed:
            decided += 1
            LogEntry.objects.log_actions(
                user_id, ToolExecution.objects.filter(pk=execution.pk), CHANGE,
                _("Approved.") if state == "approved" else _("Denied."))
    if decided:
        messages.success(request, ngettext("%(count)d call was decided.",
                                           "%(count)d calls were decided.", decided)
                         % {"count": decided})
    if refused:
        messages.error(request, _("Not decided: %(calls)s.") % {"calls": ", ".join(refused)})


__all__ = ["DECIDE_PERMISSION", "AwaitingApprovalFilter", "decide_calls"]
