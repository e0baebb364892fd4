"""The admin of schedules: an operator edits the cron, the task, the policy, or disables one.

A bad cron expression is a form error saying what is wrong (the model field's validator), as is
an interval below 1 second or a schedule with both or neither of cron and every;
saves and deletes go through the store, the only writer of turnkit rows.
"""

from __future__ import annotations

from typing import Any

from django.contrib import admin

from ..models import Schedule, ScheduleFiring
from ..store.schedules import delete_schedule_row, save_schedule_row


class ScheduleFiringInline(admin.TabularInline):
    model = ScheduleFiring
    fields = ("fired_for", "turn", "created_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    max_num = 0
    ordering = ("-fired_for",)


@admin.register(Schedule)
class ScheduleAdmin(admin.ModelAdmin):
    list_display = ("key", "agent_name", "cron", "every", "missed", "enabled", "last_fired_at")
    list_filter = ("enabled", "missed")
    search_fields = ("key", "agent_name")
    fields = ("key", "agent_name", "cron", "every", "task", "missed", "enabled", "principal",
              "last_fired_at")
    readonly_fields = ("last_fired_at",)
    inlines = [ScheduleFiringInline]

    def save_model(self, request: Any, obj: Schedule, form: Any, change: bool) -> None:
        save_schedule_row(obj)

    def delete_model(self, request: Any, obj: Schedule) -> None:
        delete_schedule_row(obj)

    def delete_queryset(self, request: Any, queryset: Any) -> None:
        for obj in queryset:
            delete_schedule_row(obj)
