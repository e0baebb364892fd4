"""Read-only admin for turnkit rows (actions that change state call services)."""

from __future__ import annotations

from typing import Any

from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.html import format_html_join
from django.utils.translation import ngettext

from .exceptions import AuthorizationError, TurnkitError
from .messages import load_parts
from .models import Conversation, Delivery, Message, ToolExecution, Turn, Wait
from .services import cancel


class ReadOnlyAdmin(admin.ModelAdmin):
    def has_add_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Any = None) -> bool:
        return False


def render_transcript(messages: Any) -> str:
    rows = []
    for m in messages:
        parts = []
        for part in load_parts(m.content):
            if part.kind == "text":
                parts.append(part.text)
            elif part.kind == "tool_call":
                parts.append(f"→ {part.name}({part.arguments})")
            elif part.kind == "tool_result":
                parts.append(f"← {part.name}: {part.content}" + (" [error]" if part.is_error
                                                                    else ""))
            elif part.kind == "data":
                parts.append(f"data: {part.data}")
        rows.append((m.sequence, m.role, " ".join(parts)))
    return format_html_join("\n", "<div><b>#{}</b> {}: {}</div>", rows)


@admin.register(Conversation)
class ConversationAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent_name", "model", "created_at")
    list_filter = ("agent_name",)
    search_fields = ("id", "agent_name")
    readonly_fields = ("transcript",)

    @admin.display(description="Transcript")
    def transcript(self, obj: Conversation) -> str:
        return render_transcript(obj.messages.order_by("sequence"))


@admin.register(Turn)
class TurnAdmin(ReadOnlyAdmin):
    list_display = ("id", "agent_name", "status", "model", "cost", "created_at", "completed_at")
    list_filter = ("status", "agent_name")
    search_fields = ("id", "conversation__id", "root_turn__id")
    list_select_related = ("conversation",)
    readonly_fields = ("transcript", "tree")
    actions = ("cancel_turns", "cancel_turns_with_descendants")

    def has_cancel_permission(self, request: HttpRequest) -> bool:
        return request.user.has_perm("turnkit.cancel_turn")

    @admin.action(description="Cancel", permissions=["cancel"])
    def cancel_turns(self, request: HttpRequest, queryset: QuerySet[Turn]) -> None:
        self._cancel(request, queryset, cascade=False)

    @admin.action(description="Cancel with descendants", permissions=["cancel"])
    def cancel_turns_with_descendants(self, request: HttpRequest,
                                      queryset: QuerySet[Turn]) -> None:
        self._cancel(request, queryset, cascade=True)

    def _cancel(self, request: HttpRequest, queryset: QuerySet[Turn], *, cascade: bool) -> None:
        principal = {"user": request.user.pk, "staff": True}
        cancelled = unchanged = 0
        refused: list[str] = []
        for turn_id in queryset.values_list("pk", flat=True):
            try:
                report = cancel(turn_id, cascade=cascade, principal=principal)
            except AuthorizationError:
                refused.append(f"{turn_id} (not authorized)")
                continue
            except (TurnkitError, Turn.DoesNotExist) as exc:
                refused.append(f"{turn_id} ({exc})")
                continue
            cancelled += len(report.cancelled)
            if not report.changed:
                unchanged += 1
        if cancelled:
            self.message_user(request, ngettext("%(count)d turn was cancelled.",
                                                "%(count)d turns were cancelled.",
                                                cancelled) % {"count": cancelled},
                              messages.SUCCESS)
        if unchanged:
            self.message_user(request, ngettext(
                "%(count)d turn had already finished; nothing changed.",
                "%(count)d turns had already finished; nothing changed.",
                unchanged) % {"count": unchanged}, messages.WARNING)
        if refused:
            self.message_user(request, ngettext(
                "%(count)d turn could not be cancelled: %(turns)s.",
                "%(count)d turns could not be cancelled: %(turns)s.",
                len(refused)) % {"count": len(refused), "turns": ", ".join(refused)},
                messages.ERROR)

    @admin.display(description="Transcript")
    def transcript(self, obj: Turn) -> str:
        return render_transcript(Message.objects.visible_to(obj))

    @admin.display(description="Tree")
    def tree(self, obj: Turn) -> str:
        rows = Turn.objects.tree(obj.root_turn_id).values_list("depth", "id", "agent_name",
                                                               "status")
        return format_html_join("\n", "<div>{} {} {} ({})</div>",
                                (("·" * d, i, a, s) for d, i, a, s in rows))


@admin.register(ToolExecution)
class ToolExecutionAdmin(ReadOnlyAdmin):
    list_display = ("id", "tool_name", "status", "turn", "created_at")
    list_filter = ("status", "tool_name")
    search_fields = ("id", "tool_call_id", "turn__id")


@admin.register(Delivery)
class DeliveryAdmin(ReadOnlyAdmin):
    list_display = ("key", "source_conversation", "destination_conversation", "delivered_at")
    search_fields = ("key",)


@admin.register(Wait)
class WaitAdmin(ReadOnlyAdmin):
    list_display = ("waiter", "target", "created_at")
