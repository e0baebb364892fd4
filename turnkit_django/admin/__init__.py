"""The operations console: read-only admin pages for turnkit rows; cancels call the service.

A turn's page leads with its facts (status, agent, principal, usage and cost of its tree, error,
timings), then its transcript as a conversation with sub-agents nested, then its tree; the stored
fields are folded away at the bottom. Who may read what: :mod:`turnkit_django.console.admin_views`.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.db.models import Count, F, OuterRef, QuerySet, Subquery, Sum
from django.http import Http404, HttpRequest, HttpResponse, HttpResponseRedirect
from django.template.response import TemplateResponse
from django.urls import URLPattern, path, reverse
from django.utils.decorators import method_decorator
from django.utils.html import format_html
from django.utils.translation import gettext_lazy as _
from django.views.decorators.http import require_http_methods

from ..console.admin_views import (
    can_cancel,
    can_read_transcripts,
    cancel_turns,
    error_summary,
    field_rows,
    forks_of,
    turn_console,
)
from ..console.timeline import conversation_transcript, load_tree
from ..models import Conversation, Delivery, ToolExecution, Turn, Wait
from ..store import provider_waits
from ..templatetags.turnkit_admin import dollars, ran, took, when
from .approvals import DECIDE_PERMISSION, AwaitingApprovalFilter, decide_calls
from .lists import CREATED, AgentFilter, BoundedPaginator, ModelFilter, ToolNameFilter


class ReadOnlyAdmin(admin.ModelAdmin):
    """No add, change or delete; a page of sections, then every stored field (private ones
    gated by ``turnkit.view_transcript``)."""

    #: Fields shown only with ``turnkit.view_transcript``.
    private_fields: frozenset[str] = frozenset()
    #: Template of the sections shown above the stored fields.
    console_template = ""
    #: Whether the stored fields are folded away (a <details> element).
    fold_stored_fields = False
    # Bounded counts only (admin_lists): never a COUNT(*) of the whole table.
    paginator = BoundedPaginator
    show_full_result_count = False

    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def get_fields(self, request: HttpRequest, obj: Any = None) -> Any:
        return []  # the change form template renders the page (admin/turnkit/change_form.html)

    def console_context(self, request: HttpRequest, obj: Any) -> dict[str, object]:
        return {}

    def render_change_form(self, request: HttpRequest, context: dict[str, object],
                           add: bool = False, change: bool = False, form_url: str = "",
                           obj: Any = None) -> HttpResponse:
        if obj is not None:
            hidden = frozenset() if can_read_transcripts(request) else self.private_fields
            context.update(tk_stored_rows=field_rows(obj, hidden),
                           tk_hidden=sorted(hidden & self.private_fields),
                           tk_console_template=self.console_template,
                           tk_fold=self.fold_stored_fields,
                           **self.console_context(request, obj))
        return super().render_change_form(request, context, add, change, form_url, obj)


def when_cell(moment: Any) -> str:
    """A timestamp to the second for a list column: the date, then the time under it."""
    if moment is None:
        return "—"
    date, time = when(moment).split(" ")[:2]
    return format_html("{}<br>{}", date, time)


def badge(status: str) -> str:
    """A turn or tool execution status, colored by the admin's stylesheet."""
    return format_html('<span class="tk-status tk-status-{}">{}</span>', status, status)


# --------------------------------------------------------------------------------- list filters


class PositionFilter(admin.SimpleListFilter):
    title = _("position")
    parameter_name = "position"

    def lookups(self, request: HttpRequest, model_admin: Any) -> Any:
        return [("root", _("root turns")), ("child", _("sub-agent turns"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() == "root":
            return queryset.filter(root_turn_id=F("id"))
        if self.value() == "child":
            return queryset.exclude(root_turn_id=F("id"))
        return queryset


class _IsSetFilter(admin.SimpleListFilter):
    """Two choices: the field ``lookup`` names is set ("yes") or empty ("no")."""

    lookup = ""
    yes: Any = _("yes")
    no: Any = _("no")

    def lookups(self, request: HttpRequest, model_admin: Any) -> Any:
        return [("yes", self.yes), ("no", self.no)]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        if self.value() in ("yes", "no"):
            return queryset.filter(**{f"{self.lookup}__isnull": self.value() == "no"})
        return queryset


class HasErrorFilter(_IsSetFilter):
    title, parameter_name, lookup = _("error"), "has_error", "error"
    yes, no = _("with an error"), _("without an error")


class ExecutionFilter(_IsSetFilter):
    title, parameter_name, lookup = _("execution"), "background", "submitted_at"
    yes, no = _("background (submitted)"), _("inline")


class DeliveredFilter(_IsSetFilter):
    title, parameter_name, lookup = _("delivered"), "delivered", "delivered_at"
    yes, no = _("delivered"), _("pending")


class ChildConversationFilter(_IsSetFilter):
    title, parameter_name, lookup = _("position"), "child", "parent_conversation"
    yes, no = _("sub-agent conversations"), _("root conversations")


# ------------------------------------------------------------------------------------- turns


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ("turn", "status_badge", "depth", "error_short", "tree_cost", "submitted",
                    "completed")
    list_display_links = ("turn",)
    list_filter = ("status", PositionFilter, HasErrorFilter, ExecutionFilter, AgentFilter,
                   ModelFilter, CREATED)
    search_fields = ("id", "conversation__id", "root_turn__id", "parent_turn__id",
                     "agent_name", "claimed_by")
    ordering = ("-created_at",)
    actions = ("cancel_turns", "cancel_turns_with_descendants")
    private_fields = frozenset({"principal", "options", "state", "error", "output_text",
                                "output_data", "audit", "controls"})  # steering text, principals
    console_template = "turnkit_django/admin/turn_console.html"
    fold_stored_fields = True

    def get_queryset(self, request: HttpRequest) -> QuerySet[Turn]:
        tree = Turn.objects.filter(root_turn_id=OuterRef("root_turn_id")).order_by()
        return super().get_queryset(request).annotate(
            tree_cost_sum=Subquery(tree.values("root_turn_id").annotate(total=Sum("cost"))
                                   .values("total")[:1]),
            # A scalar subquery, not EXISTS: PostgreSQL may run an EXISTS as one hash of every
            # turn (a seq scan per page); a correlated aggregate runs for the page's rows only.
            tree_cost_unknown=Subquery(tree.filter(cost_unknown=True).values("root_turn_id")
                                       .annotate(n=Count("pk")).values("n")[:1]),
        )

    # -- columns

    @admin.display(description=_("turn"), ordering="created_at")
    def turn(self, obj: Turn) -> str:
        return format_html('<b>{}</b><br><span class="tk-id">{}</span>', obj.agent_name, obj.pk)

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: Turn) -> str:
        return badge(obj.status)

    @admin.display(description=_("error"))
    def error_short(self, obj: Turn) -> str:
        summary = error_summary(obj.error)
        return summary if len(summary) <= 60 else summary[:59] + "…"

    @admin.display(description=_("tree cost"))  # sorting by it would sum every tree
    def tree_cost(self, obj: Turn) -> str:
        """The cost of the whole tree the turn belongs to (root and descendants)."""
        if getattr(obj, "tree_cost_unknown", obj.cost_unknown):  # a count, None for none
            return dollars(None)
        return dollars(getattr(obj, "tree_cost_sum", obj.cost))

    @admin.display(description=_("submitted"), ordering="submitted_at")
    def submitted(self, obj: Turn) -> str:
        return when_cell(obj.submitted_at)

    @admin.display(description=_("completed"), ordering="completed_at")
    def completed(self, obj: Turn) -> str:
        """When the turn finished, and how long it ran ("never ran": cancelled while pending)."""
        if obj.completed_at is None:
            return "—"
        return format_html('{}<br><span class="tk-muted">{}</span>', when_cell(obj.completed_at),
                           ran(obj) if obj.started_at is None else f"{_('took')} {ran(obj)}")

    # -- the page

    def console_context(self, request: HttpRequest, obj: Turn) -> dict[str, object]:
        return turn_console(request, obj)

    def changelist_view(self, request: HttpRequest, extra_context: Any = None) -> Any:
        waits = provider_waits.waiting_counts()
        context = {"tk_provider_waits": sum(waits.values()), "tk_provider_waits_by": waits,
                   **(extra_context or {})}
        return super().changelist_view(request, context)

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        view = self.admin_site.admin_view
        return [
            path("<path:object_id>/cancel/", view(self.cancel_view),
                 {"cascade": False}, name=f"{prefix}_cancel"),
            path("<path:object_id>/cancel-with-descendants/", view(self.cancel_view),
                 {"cascade": True}, name=f"{prefix}_cancel_descendants"),
            *super().get_urls(),
        ]

    # -- cancelling (actions on the list, buttons on the page)

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return can_cancel(request)

    @admin.action(description=_("Cancel"), permissions=["cancel"])
    def cancel_turns(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        cancel_turns(request, ids, cascade=False).report_to(request)

    @admin.action(description=_("Cancel with descendants"), permissions=["cancel"])
    def cancel_turns_with_descendants(self, request: HttpRequest,
                                      queryset: QuerySet[Turn]) -> None:
        ids = list(queryset.values_list("pk", flat=True))
        cancel_turns(request, ids, cascade=True).report_to(request)

    @method_decorator(require_http_methods(["GET", "POST"]))
    def cancel_view(self, request: HttpRequest, object_id: str, cascade: bool) -> HttpResponse:
        """GET: what would be cancelled, and a confirmation form; POST: cancel."""
        turn = self.get_object(request, unquote(object_id))
        if turn is None:
            raise Http404(_("No turn with id %(id)r.") % {"id": object_id})
        if not (self.has_view_permission(request, turn) and self.has_cancel_permission(request)):
            raise PermissionDenied
        page = reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change",
                       args=[turn.pk], current_app=self.admin_site.name)
        if request.method == "POST":
            cancel_turns(request, [turn.pk], cascade=cascade).report_to(request)
            return HttpResponseRedirect(page)
        tree = load_tree(turn)
        affected = tree.active_in(turn)
        if not cascade:
            affected = [t for t in affected if t.pk == turn.pk]
        context = {
            **self.admin_site.each_context(request),
            "title": _("Cancel with descendants?") if cascade else _("Cancel this turn?"),
            "subtitle": str(turn),
            "opts": self.opts,
            "object": turn,
            "cascade": cascade,
            "affected": affected,
            "turn_url": page,
        }
        request.current_app = self.admin_site.name
        return TemplateResponse(request, "turnkit_django/admin/cancel_confirmation.html",
                                context)


# ----------------------------------------------------------------------------- conversations


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent_name", "model", "parent_conversation", "created", "updated")
    list_filter = (ChildConversationFilter, AgentFilter, ModelFilter, CREATED)
    list_select_related = ("parent_conversation",)
    search_fields = ("id", "agent_name", "subject_id", "parent_conversation__id",
                     "parent_turn__id")
    ordering = ("-created_at",)
    private_fields = frozenset({"principal", "context", "metadata", "subject_prompt"})
    console_template = "turnkit_django/admin/conversation_console.html"
    fold_stored_fields = True

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Conversation) -> str:
        return when(obj.created_at)

    @admin.display(description=_("updated"), ordering="updated_at")
    def updated(self, obj: Conversation) -> str:
        return when(obj.updated_at)

    def console_context(self, request: HttpRequest, obj: Conversation) -> dict[str, object]:
        readable = can_read_transcripts(request)
        return {"tk_view": conversation_transcript(obj, transcript=readable),
                "tk_readable": readable, "tk_forks": forks_of(obj)}


# ------------------------------------------------------------------ tool executions, the rest


@admin.register(ToolExecution)
class ToolExecutionAdmin(ReadOnlyAdmin):
    list_display = ("id", "tool_name", "status_badge", "turn", "attempts", "started",
                    "completed", "duration")
    list_filter = (AwaitingApprovalFilter, "status", "budget_denied", ToolNameFilter, CREATED)
    search_fields = ("id", "tool_call_id", "turn__id", "tool_name")
    list_select_related = ("turn",)
    ordering = ("-created_at",)
    private_fields = frozenset({"arguments", "result", "error", "approval", "attempt_log"})
    actions = ("approve_calls", "deny_calls")

    def has_decide_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm(DECIDE_PERMISSION)

    @admin.action(description=_("Approve"), permissions=["decide"])
    def approve_calls(self, request: HttpRequest, queryset: QuerySet[ToolExecution]) -> None:
        decide_calls(request, queryset, "approved")

    @admin.action(description=_("Deny"), permissions=["decide"])
    def deny_calls(self, request: HttpRequest, queryset: QuerySet[ToolExecution]) -> None:
        decide_calls(request, queryset, "denied")

    @admin.display(description=_("status"), ordering="status")
    def status_badge(self, obj: ToolExecution) -> str:
        return badge(obj.status)

    @admin.display(description=_("started"), ordering="started_at")
    def started(self, obj: ToolExecution) -> str:
        return when(obj.started_at)

    @admin.display(description=_("completed"), ordering="completed_at")
    def completed(self, obj: ToolExecution) -> str:
        return when(obj.completed_at)

    @admin.display(description=_("took"))
    def duration(self, obj: ToolExecution) -> str:
        return took(obj.started_at, obj.completed_at)


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ("key", "source_conversation", "destination_conversation", "source_turn",
                    "created", "delivered")
    list_filter = (DeliveredFilter,)
    search_fields = ("id", "key", "source_conversation__id", "destination_conversation__id",
                     "source_turn__id")
    list_select_related = ("source_conversation", "destination_conversation", "source_turn")
    ordering = ("-created_at",)
    date_hierarchy = "created_at"
    private_fields = frozenset({"payload"})

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Delivery) -> str:
        return when(obj.created_at)

    @admin.display(description=_("delivered"), ordering="delivered_at")
    def delivered(self, obj: Delivery) -> str:
        return when(obj.delivered_at) if obj.delivered_at else str(_("pending"))


@admin.register(Wait)
class WaitAdmin(ReadOnlyAdmin):
    list_display = ("id", "waiter", "waiter_status", "target", "target_status", "created")
    list_filter = ("waiter__status", "target__status")
    search_fields = ("waiter__id", "target__id", "waiter__agent_name", "target__agent_name")
    list_select_related = ("waiter", "target")
    ordering = ("-created_at",)

    @admin.display(description=_("waiter status"), ordering="waiter__status")
    def waiter_status(self, obj: Wait) -> str:
        return badge(obj.waiter.status)

    @admin.display(description=_("target status"), ordering="target__status")
    def target_status(self, obj: Wait) -> str:
        return badge(obj.target.status)

    @admin.display(description=_("created"), ordering="created_at")
    def created(self, obj: Wait) -> str:
        return when(obj.created_at)


from . import schedules as admin_schedules  # noqa: E402, F401  (registers the schedules' admin)
