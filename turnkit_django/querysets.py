"""Queryset vocabulary named after states: ``actionable()``, ``stale(before)`` ..."""

from __future__ import annotations

from datetime import datetime

from django.db import models

from .states import ACTIVE_TURN_STATUSES, FINISHED_TOOL_STATUSES, ToolStatus, TurnStatus


class ConversationQuerySet(models.QuerySet):
    def roots(self) -> ConversationQuerySet:
        return self.filter(parent_conversation__isnull=True)


class TurnQuerySet(models.QuerySet):
    def active(self) -> TurnQuerySet:
        return self.filter(status__in=ACTIVE_TURN_STATUSES)

    def terminal(self) -> TurnQuerySet:
        return self.exclude(status__in=ACTIVE_TURN_STATUSES)

    def background(self) -> TurnQuerySet:
        return self.filter(submitted_at__isnull=False)

    def inline(self) -> TurnQuerySet:
        return self.filter(submitted_at__isnull=True)

    def actionable(self) -> TurnQuerySet:
        """Background turns maintenance may act on (matches the partial actionable index)."""
        return self.background().filter(
            status__in=[TurnStatus.PENDING, TurnStatus.WAITING, TurnStatus.RUNNING]
        )

    def stale(self, before: datetime) -> TurnQuerySet:
        """Running turns whose heartbeat (or start) is older than ``before``."""
        return self.filter(status=TurnStatus.RUNNING, heartbeat_at__lt=before)

    def roots(self) -> TurnQuerySet:
        return self.filter(root_turn_id=models.F("id"))


class ToolExecutionQuerySet(models.QuerySet):
    def running(self) -> ToolExecutionQuerySet:
        return self.filter(status=ToolStatus.RUNNING)

    def finished(self) -> ToolExecutionQuerySet:
        return self.filter(status__in=FINISHED_TOOL_STATUSES)


class DeliveryQuerySet(models.QuerySet):
    def pending(self) -> DeliveryQuerySet:
        return self.filter(delivered_at__isnull=True)
