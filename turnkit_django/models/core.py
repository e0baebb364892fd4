"""Conversations, turns, their leases and messages (the rest: :mod:`.coordination`).

Only :mod:`turnkit_django.store` writes these rows. Every invariant a constraint can carry is a
constraint: gap-free message sequences are unique per conversation, a tool call has one execution
per turn, a delivery key is unique store-wide, a wait edge exists once, and a conversation runs
at most one submitted turn at a time.
"""

from __future__ import annotations

from decimal import Decimal
from functools import partial

from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models
from django.db.models import Q
from django.utils.translation import gettext_lazy as _

from ..base.fields import StorableJSONField, StorableTextField
from ..base.ids import new_id
from ..base.serialization import JsonObject
from ..base.states import TurnStatus
from ..messages import MessageKind, MessageRole
from .querysets import ConversationQuerySet, MessageQuerySet, TurnQuerySet, UnorderedManager


def _where_set(prefix: str, *fields: str) -> list[models.Index]:
    """Indexes on nullable foreign keys that cover only the rows where the key is set."""
    short = {"tool_execution": "tex", "conversation": "conv"}
    return [models.Index(fields=[field], condition=Q(**{f"{field}__isnull": False}),
                         name="_".join(["turnkit", prefix,
                                        *(short.get(w, w) for w in field.split("_", 1))]))
            for field in fields]


class Conversation(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=partial(new_id, "conv"),
                          editable=False)
    agent_name = models.CharField(max_length=200)
    model = models.CharField(max_length=200, blank=True, default="")
    subject_type = models.ForeignKey(ContentType, null=True, blank=True, on_delete=models.SET_NULL,
                                     db_index=False)
    subject_id = models.CharField(max_length=255, blank=True, default="")
    subject = GenericForeignKey("subject_type", "subject_id")
    subject_prompt = models.TextField(blank=True, default="")
    principal = StorableJSONField(null=True, blank=True)
    context = StorableJSONField(default=dict, blank=True)
    metadata = StorableJSONField(default=dict, blank=True)
    parent_conversation = models.ForeignKey("self", null=True, blank=True, db_index=False,
                                            on_delete=models.CASCADE,
                                            related_name="child_conversations")
    parent_turn = models.ForeignKey("Turn", null=True, blank=True, on_delete=models.CASCADE,
                                    related_name="+", db_index=False)
    parent_tool_execution = models.ForeignKey(
        "ToolExecution", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        db_index=False,
    )
    # conv.fork(at=...): the conversation whose messages 1..forked_at this one copied.
    forked_from = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                    related_name="forks", db_index=False)
    forked_at = models.PositiveBigIntegerField(null=True, blank=True)
    # Highest allocated message sequence; incremented under the conversation's row lock.
    last_sequence = models.PositiveBigIntegerField(default=0)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = ConversationQuerySet.as_manager()
    unordered = UnorderedManager()

    class Meta:
        base_manager_name = "unordered"
        verbose_name = _("conversation")
        verbose_name_plural = _("conversations")
        ordering = ["-created_at"]
        indexes = [
            models.Index(fields=["agent_name", "created_at"], name="turnkit_conv_agent"),
            models.Index(fields=["updated_at"], name="turnkit_conv_idle",
                         condition=Q(parent_conversation__isnull=True)),
            # Foreign keys that are null on most rows are indexed where set only (deletes and
            # the tree's reads look them up by value, which implies "not null").
            *_where_set("conv", "parent_conversation", "parent_turn", "parent_tool_execution",
                        "subject_type", "forked_from"),
            # The admin's list, newest first (ORDER BY created_at DESC, id DESC LIMIT n).
            models.Index(fields=["-created_at", "-id"], name="turnkit_conv_listed"),
        ]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.id}"


class Turn(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=partial(new_id, "turn"),
                          editable=False)
    # Indexed by turnkit_turn_conv (conversation, created_at).
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE, related_name="turns",
                                     db_index=False)
    agent_name = models.CharField(max_length=200)
    parent_turn = models.ForeignKey(
        "self", null=True, blank=True, on_delete=models.CASCADE, related_name="child_turns",
        db_index=False,
    )
    parent_tool_execution = models.ForeignKey(
        "ToolExecution", null=True, blank=True, on_delete=models.CASCADE,
        related_name="child_turns", db_index=False,
    )
    root_turn = models.ForeignKey("self", on_delete=models.CASCADE, related_name="tree_turns")
    # run.retry(): the run this one runs again (a new root over a copy of its input).
    retry_of = models.ForeignKey("self", null=True, blank=True, on_delete=models.SET_NULL,
                                 related_name="retries", db_index=False)
    depth = models.PositiveSmallIntegerField(default=0)
    status = models.CharField(max_length=16, choices=TurnStatus.choices,
                              default=TurnStatus.PENDING)
    model = models.CharField(max_length=200)
    # Write-once configuration: limits snapshot, output schema, thinking, prompt mode, context ...
    options = StorableJSONField(default=dict, blank=True)
    # The persisted loop: phase, response message, candidate output, counters.
    state = StorableJSONField(default=dict, blank=True)
    principal = StorableJSONField(null=True, blank=True)
    # TENANT_LIMITS' key of the principal, set at creation; NULL (not ""): no tenant limit, and
    # outside the partial index a claim counts.
    tenant = models.CharField(max_length=200, null=True, blank=True)  # noqa: DJ001
    # The last message sequence the turn's input includes; frozen at creation.
    context_sequence = models.PositiveBigIntegerField(default=0)
    usage = StorableJSONField(default=dict, blank=True)
    cost = models.DecimalField(default=Decimal(0), max_digits=18, decimal_places=8)
    cost_unknown = models.BooleanField(default=False)
    error = StorableJSONField(null=True, blank=True)
    output_text = StorableTextField(blank=True, default="")
    output_data = StorableJSONField(null=True, blank=True)
    # The output policies' verdict (with earlier revisions' audits), when the agent has policies.
    audit = StorableJSONField(null=True, blank=True)
    submitted_at = models.DateTimeField(null=True, blank=True)
    deadline_at = models.DateTimeField(null=True, blank=True)
    # Claim: the fence grows on every claim and revocation; writes carry the fence they hold.
    fence = models.PositiveBigIntegerField(default=0)
    claimed_by = models.CharField(max_length=200, blank=True, default="")
    fence_log = StorableJSONField(default=list, blank=True)
    recovery_attempts = models.PositiveIntegerField(default=0)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    # Root-wide budget ledger; meaningful on root turns only, updated under the tree lock.
    tree_iterations = models.PositiveIntegerField(default=0)
    tree_tool_executions = models.PositiveIntegerField(default=0)
    tree_tool_counts = StorableJSONField(default=dict, blank=True)
    tree_spend = models.DecimalField(default=Decimal(0), max_digits=18, decimal_places=8)
    # Interactive controls: a pause request, steering receipts, when the turn was paused.
    controls = StorableJSONField(default=dict, blank=True)
    # A control waits for the worker: its next fast-path step refuses, so it sees it.
    controls_pending = models.BooleanField(default=False)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    objects = TurnQuerySet.as_manager()
    unordered = UnorderedManager()

    class Meta:
        base_manager_name = "unordered"
        verbose_name = _("turn")
        verbose_name_plural = _("turns")
        ordering = ["created_at"]
        # view_transcript gates transcripts, run context, principals and outputs in the admin.
        permissions = [("cancel_turn", _("Can cancel turns")),
                       ("view_transcript", _("Can view transcripts, run context and principals"))]
        indexes = [
            models.Index(fields=["conversation", "created_at"], name="turnkit_turn_conv"),
            # Reconcile looks at running turns only (their leases are joined by primary key).
            models.Index(fields=["id"], name="turnkit_turn_running",
                         condition=Q(status=TurnStatus.RUNNING)),
            models.Index(
                fields=["updated_at"],
                name="turnkit_turn_actionable",
                condition=Q(submitted_at__isnull=False)
                & Q(status__in=[TurnStatus.PENDING, TurnStatus.WAITING, TurnStatus.RUNNING]),
            ),
            models.Index(
                fields=["updated_at"],
                name="turnkit_turn_inline_running",
                condition=Q(submitted_at__isnull=True)
                & Q(status__in=[TurnStatus.PENDING, TurnStatus.RUNNING]),
            ),
            # Prune: a conversation's active turns (its candidates' NOT EXISTS, the checks).
            models.Index(fields=["conversation"], name="turnkit_turn_active_conv",
                         condition=Q(status__in=[TurnStatus.PENDING, TurnStatus.WAITING,
                                                 TurnStatus.PAUSED, TurnStatus.RUNNING])),
            # Live turns by status and the oldest pending one (metrics, turnkit_stats).
            models.Index(fields=["status", "created_at"], name="turnkit_turn_active",
                         condition=Q(status__in=[TurnStatus.PENDING, TurnStatus.WAITING,
                                                 TurnStatus.PAUSED, TurnStatus.RUNNING])),
            # Turns that ended in a window (turnkit_stats: dead letters, tokens, cost).
            models.Index(fields=["completed_at"], name="turnkit_turn_completed",
                         condition=Q(completed_at__isnull=False)),
            # Turns reconcile recovered (turnkit_stats: recoveries in a window).
            models.Index(fields=["updated_at"], name="turnkit_turn_recovered",
                         condition=Q(recovery_attempts__gt=0)),
            # A claim counts its tenant's running background turns (TENANT_LIMITS).
            models.Index(fields=["tenant"], name="turnkit_turn_tenant_running",
                         condition=Q(status=TurnStatus.RUNNING) & Q(tenant__isnull=False)
                         & Q(submitted_at__isnull=False)),
            *_where_set("turn", "parent_turn", "parent_tool_execution", "retry_of"),
            # The admin's list, newest first (ORDER BY created_at DESC, id DESC LIMIT n).
            models.Index(fields=["-created_at", "-id"], name="turnkit_turn_listed"),
        ]
        constraints = [
            models.UniqueConstraint(
                fields=["conversation"],
                condition=Q(status=TurnStatus.RUNNING) & Q(submitted_at__isnull=False),
                name="turnkit_one_running_submitted_turn",
            ),
            models.CheckConstraint(
                condition=Q(status__in=TurnStatus.values), name="turnkit_turn_status_valid"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.agent_name} {self.id} ({self.status})"

    @property
    def is_root(self) -> bool:
        return self.root_turn_id == self.id

    def envelope(self) -> JsonObject:
        """The compact result another turn receives for this one (a join, a callback), with
        the output metadata its tools or policies set for the output."""
        envelope: JsonObject = {"agent": self.agent_name, "conversation_id": self.conversation_id,
                                "turn_id": self.pk, "status": self.status,
                                "output_text": self.output_text,
                                "output_data": self.output_data, "error": self.error}
        metadata = (self.state or {}).get("output_metadata")
        if metadata is not None:
            envelope["output_metadata"] = metadata
        return envelope


class Lease(models.Model):
    """The claim on a running turn as its worker keeps it alive: fence, worker, last heartbeat.

    A row apart from the turn's, so a heartbeat never waits for a lock on the turn row (the tree
    lock, or any session's ``select_for_update``). Stamped with the database's clock.
    """

    turn = models.OneToOneField(Turn, primary_key=True, on_delete=models.CASCADE,
                                related_name="lease")
    fence = models.PositiveBigIntegerField()
    worker = models.CharField(max_length=200)
    heartbeat_at = models.DateTimeField()
    # A provider wait in progress (store.provider_waits): the limit's key, since when.
    waiting_on = models.CharField(max_length=200, blank=True, null=True)  # noqa: DJ001
    waiting_since = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name = _("lease")
        verbose_name_plural = _("leases")

    def __str__(self) -> str:
        return f"lease of {self.turn_id} (fence {self.fence})"


class Message(models.Model):
    id = models.CharField(primary_key=True, max_length=40, default=partial(new_id, "msg"),
                          editable=False)
    # Indexed by turnkit_message_sequence_unique (conversation, sequence).
    conversation = models.ForeignKey(Conversation, on_delete=models.CASCADE,
                                     related_name="messages", db_index=False)
    turn = models.ForeignKey(Turn, null=True, blank=True, on_delete=models.CASCADE,
                             related_name="messages")
    sequence = models.PositiveBigIntegerField()
    role = models.CharField(max_length=16, choices=MessageRole.choices)
    kind = models.CharField(max_length=32, choices=MessageKind.choices, default=MessageKind.TEXT)
    content = StorableJSONField(default=list)
    tool_execution = models.ForeignKey(
        "ToolExecution", null=True, blank=True, on_delete=models.SET_NULL, related_name="messages",
        db_index=False,
    )
    metadata = StorableJSONField(default=dict, blank=True)
    # The fence of the turn's claim that wrote this message (null for application writes).
    fence = models.PositiveBigIntegerField(null=True, blank=True)
    # The application's idempotency key of an input (``ask(key=...)``), unique per conversation.
    key = models.CharField(max_length=255, blank=True, default="")
    created_at = models.DateTimeField(auto_now_add=True)

    objects = MessageQuerySet.as_manager()
    unordered = UnorderedManager()

    class Meta:
        base_manager_name = "unordered"
        ordering = ["conversation", "sequence"]
        verbose_name = _("message")
        verbose_name_plural = _("messages")
        constraints = [
            models.UniqueConstraint(fields=["conversation", "sequence"],
                                    name="turnkit_message_sequence_unique"),
            models.UniqueConstraint(fields=["conversation", "key"], condition=~Q(key=""),
                                    name="turnkit_message_key_unique"),
        ]
        indexes = [*_where_set("msg", "tool_execution")]

    def __str__(self) -> str:
        return f"#{self.sequence} {self.role}/{self.kind}"
