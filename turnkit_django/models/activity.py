"""Tool executions, waits, deliveries and events: what a turn coordinates with.

Only :mod:`turnkit_django.store` writes these rows (see :mod:`.core`).
"""

from __future__ import annotations

from functools import partial
from typing import ClassVar

from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from ..base.fields import StorableCharField, StorableJSONField
from ..base.ids import new_id
from ..base.states import ToolStatus
from ..messages import CALL_FIELD_LENGTH
from .core import Conversation, Message, Turn
from .querysets import DeliveryQuerySet, ToolExecutionQuerySet, UnorderedManager, WaitQuerySet


class ToolExecution(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=partial(new_id, "tex"),
                          editable=False)
    # Indexed by turnkit_tool_call_unique (turn, tool_call_id).
    turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="tool_executions",
                             db_index=False)
    tool_call_id = StorableCharField(max_length=CALL_FIELD_LENGTH)  # bounded: distinct_call_ids
    tool_name = StorableCharField(max_length=CALL_FIELD_LENGTH)
    status = models.CharField(max_length=16, choices=ToolStatus.choices,
                              default=ToolStatus.PENDING)
    arguments = StorableJSONField(default=dict, blank=True)
    result = StorableJSONField(null=True, blank=True)
    error = StorableJSONField(null=True, blank=True)
    budget_denied = models.BooleanField(default=False)
    # A call that waits for a person: requested, then approved (maybe with edited arguments),
    # denied or expired; see services.approvals.
    approval = StorableJSONField(null=True, blank=True)
    fence = models.PositiveBigIntegerField(null=True, blank=True)
    attempts = models.PositiveIntegerField(default=0)
    # The failed attempts of a tool with retries (runtime.retries), oldest first.
    attempt_log = StorableJSONField(default=list, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ToolExecutionQuerySet.as_manager()
    unordered = UnorderedManager()

    class Meta:
        base_manager_name = "unordered"
        verbose_name = _("tool execution")
        verbose_name_plural = _("tool executions")
        ordering = ["created_at"]
        constraints = [
            models.UniqueConstraint(fields=["turn", "tool_call_id"],
                                    name="turnkit_tool_call_unique"),
        ]
        indexes = [
            # The inbox and the expiry sweep read pending approvals only. The predicate names
            # the approval alone: with ``status`` in it every status change of every execution
            # would touch an indexed column, and no execution update would be HOT.
            models.Index(fields=["created_at"], name="turnkit_tex_approval_requested",
                         condition=Q(approval__state="requested")),
            # The admin's list, newest first (ORDER BY created_at DESC, id DESC LIMIT n).
            models.Index(fields=["-created_at", "-id"], name="turnkit_tex_listed"),
        ]
        permissions = [("decide_approval", _("Can approve or deny tool calls"))]

    def __str__(self) -> str:
        return f"{self.tool_name} {self.id} ({self.status})"

    @property
    def idempotency_key(self) -> str:
        return f"turnkit:{self.id}"


class Wait(models.Model):
    # Indexed by turnkit_wait_edge_unique (waiter, target).
    waiter = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="waits",
                               db_index=False)
    target = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="waited_by")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = WaitQuerySet.as_manager()

    class Meta:
        verbose_name = _("wait")
        verbose_name_plural = _("waits")
        constraints = [
            models.UniqueConstraint(fields=["waiter", "target"], name="turnkit_wait_edge_unique"),
        ]

    def __str__(self) -> str:
        return f"{self.waiter_id} waits for {self.target_id}"


class Delivery(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=partial(new_id, "dlv"),
                          editable=False)
    key = models.CharField(max_length=255, unique=True)
    source_conversation = models.ForeignKey(
        Conversation, null=True, blank=True, on_delete=models.SET_NULL, related_name="outbox_set"
    )
    destination_conversation = models.ForeignKey(
        Conversation, on_delete=models.CASCADE, related_name="inbox_set"
    )
    source_turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="+")
    payload = StorableJSONField(default=dict)
    message = models.ForeignKey(Message, null=True, blank=True, on_delete=models.SET_NULL,
                                related_name="+")
    delivered_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    objects = DeliveryQuerySet.as_manager()

    class Meta:
        verbose_name = _("delivery")
        verbose_name_plural = _("deliveries")
        ordering = ["created_at"]
        indexes = [
            models.Index(fields=["created_at"], name="turnkit_delivery_pending",
                         condition=Q(delivered_at__isnull=True)),
        ]

    def __str__(self) -> str:
        return f"delivery {self.key!r}"


class Event(models.Model):
    """A durable lifecycle event of a turn tree, written in the transaction of its fact.

    The id is the cursor: every event of a tree is written under the tree lock, so within a
    tree ids grow in commit order and a reader after cursor ``n`` misses nothing.
    """

    #: ``run.stream()`` yields events and deltas; an event is not a delta.
    is_delta: ClassVar[bool] = False
    id = models.BigAutoField(primary_key=True)
    # Indexed by turnkit_event_tree (root_turn, id), which the cursor reads.
    root_turn = models.ForeignKey(Turn, on_delete=models.CASCADE, related_name="+",
                                  db_index=False)
    turn_id = models.CharField(max_length=40)
    conversation_id = models.CharField(max_length=40)
    type = models.CharField(max_length=64)
    payload = StorableJSONField(default=dict, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        verbose_name = _("event")
        verbose_name_plural = _("events")
        ordering = ["id"]
        indexes = [models.Index(fields=["root_turn", "id"], name="turnkit_event_tree")]

    def __str__(self) -> str:
        return f"#{self.id} {self.type} {self.turn_id}"
