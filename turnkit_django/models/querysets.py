"""The read vocabulary: querysets named after states (``active()``, ``lease_expired(before)``).

Code outside this module reads turnkit rows through these methods instead of writing status
filters by hand, so each rule ("the lane is busy", "the messages a turn sees") is written once.
"""

from __future__ import annotations

from collections.abc import Iterator
from datetime import datetime
from typing import Any, Protocol

from django.db import models
from django.db.models import Count, Exists, F, OuterRef, Q, Subquery, Window
from django.db.models.expressions import Combinable
from django.db.models.functions import Coalesce, RowNumber
from django.db.models.query import ModelIterable

from ..base.states import ACTIVE_TURN_STATUSES, BUSY_TURN_STATUSES, ToolStatus, TurnStatus
from ..messages import PRIVATE_MESSAGE_KINDS, PRIVATE_PART_KINDS


class TurnRow(Protocol):
    """What the reads below use of a ``Turn`` row (the models import this module, so it names
    no model)."""

    @property
    def pk(self) -> Any: ...

    @property
    def conversation_id(self) -> str: ...

    @property
    def submitted_at(self) -> datetime | None: ...

    @property
    def context_sequence(self) -> int: ...


_ACTIVE = [str(s) for s in ACTIVE_TURN_STATUSES]
_BUSY = [str(s) for s in BUSY_TURN_STATUSES]


class UnorderedManager(models.Manager):
    """The base manager of the rows a delete cascades through (Django's delete collector reads
    them with it, as do forward relations and ``save()``): without the model's default
    ordering, which sorted every row a cascade collected and joined each message to its
    conversation (a message orders by its conversation's creation)."""

    def get_queryset(self) -> models.QuerySet:
        return super().get_queryset().order_by()


class ConversationQuerySet(models.QuerySet):
    def roots(self) -> ConversationQuerySet:
        return self.filter(parent_conversation__isnull=True)

    def prunable(self, before: datetime) -> ConversationQuerySet:
        """Root conversations idle since ``before`` with their own and their children's turns
        finished: the candidates :func:`~turnkit_django.services.prune` then checks further
        (every level below, turns of their trees elsewhere, waits, deliveries in flight)."""
        return self.roots().filter(updated_at__lt=before).exclude(
            turns__status__in=_ACTIVE).exclude(child_conversations__turns__status__in=_ACTIVE)


class TurnQuerySet(models.QuerySet):
    def active(self) -> TurnQuerySet:
        return self.filter(status__in=_ACTIVE)

    def terminal(self) -> TurnQuerySet:
        return self.exclude(status__in=_ACTIVE)

    def pending(self) -> TurnQuerySet:
        return self.filter(status=TurnStatus.PENDING)

    def running(self) -> TurnQuerySet:
        return self.filter(status=TurnStatus.RUNNING)

    def waiting(self) -> TurnQuerySet:
        return self.filter(status=TurnStatus.WAITING)

    def busy(self) -> TurnQuerySet:
        """Turns that hold their conversation's lane: running, waiting or paused."""
        return self.filter(status__in=_BUSY)

    def prepared(self) -> TurnQuerySet:
        """Inline turns created and never started (neither executed nor submitted yet)."""
        return self.pending().filter(submitted_at__isnull=True, started_at__isnull=True)

    def background(self) -> TurnQuerySet:
        return self.filter(submitted_at__isnull=False)

    def tree(self, root_id: str) -> TurnQuerySet:
        """The turns of one tree, oldest first."""
        return self.filter(root_turn_id=root_id).order_by("created_at", "id")

    def actionable(self) -> TurnQuerySet:
        """Background turns maintenance may act on (matches the partial actionable index)."""
        return self.background().filter(
            status__in=[TurnStatus.PENDING, TurnStatus.WAITING, TurnStatus.RUNNING])

    def lease_expired(self, before: datetime) -> TurnQuerySet:
        """Running turns whose last heartbeat is older than ``before`` (their worker may be
        dead), oldest first: one without a lease row first, on every database."""
        return self.running().filter(
            Q(lease__heartbeat_at__lt=before) | Q(lease__isnull=True)
        ).order_by(F("lease__heartbeat_at").asc(nulls_first=True), "id")

    def finished_since(self, moment: datetime) -> TurnQuerySet:
        """Turns that ended at or after ``moment`` (the partial completed index)."""
        return self.filter(completed_at__gte=moment)

    def recovered_since(self, moment: datetime) -> TurnQuerySet:
        """Turns reconcile recovered that changed status at or after ``moment`` (the partial
        recovered index): a superset of those recovered since then."""
        return self.filter(recovery_attempts__gt=0, updated_at__gte=moment)

    def dead_lettered(self) -> TurnQuerySet:
        """Turns reconcile gave up on (failed with a ``DeadLetter`` error)."""
        return self.filter(status=TurnStatus.FAILED, error__type="DeadLetter")

    def queued_in_lane(self) -> TurnQuerySet:
        """Submitted pending turns, in the order their lane runs them."""
        return self.background().pending().order_by("submitted_at", "id")

    def blocking_lane_of(self, turn: TurnRow) -> TurnQuerySet:
        """Turns that keep ``turn`` from being claimed: another turn of its conversation is busy,
        or an older submitted turn is still pending (the lane is FIFO)."""
        older = Q(status=TurnStatus.PENDING, submitted_at__isnull=False) & (
            Q(submitted_at__lt=turn.submitted_at)
            | Q(submitted_at=turn.submitted_at, id__lt=turn.pk))
        return self.filter(conversation_id=turn.conversation_id).exclude(pk=turn.pk).filter(
            Q(status__in=_BUSY) | older)

    def _lane_blockers(self) -> tuple[Exists, Exists]:
        """:meth:`blocking_lane_of` the outer query's turn, as two subqueries: another turn of
        its conversation is busy; an older submitted turn of it is pending."""
        lane = self.model._default_manager.filter(
            conversation_id=OuterRef("conversation_id")).exclude(pk=OuterRef("pk"))
        busy = lane.filter(status__in=_BUSY)
        older = lane.filter(status=TurnStatus.PENDING, submitted_at__isnull=False).filter(
            Q(submitted_at__lt=OuterRef("submitted_at"))
            | Q(submitted_at=OuterRef("submitted_at"), id__lt=OuterRef("pk")))
        return Exists(busy), Exists(older)

    def with_lane_blocked(self) -> TurnQuerySet:
        """Annotate each turn with ``lane_busy`` and ``lane_older`` (see
        :meth:`blocking_lane_of`), read in the same statement, hence the same snapshot, as
        the row."""
        busy, older = self._lane_blockers()
        return self.annotate(lane_busy=busy, lane_older=older)

    def lane_heads(self) -> TurnQuerySet:
        """Submitted pending turns at the head of their conversation's lane (claimable now)."""
        busy, older = self._lane_blockers()
        return self.actionable().pending().filter(~busy, ~older)

    def tenant_running(self, tenant: str | OuterRef) -> TurnQuerySet:
        """Running background turns of ``tenant`` (what ``TENANT_LIMITS`` bounds; the partial
        ``turnkit_turn_tenant_running`` index)."""
        return self.running().filter(tenant=tenant, submitted_at__isnull=False)

    def ahead_in_tenant(self, tenant: str, submitted_at: datetime, pk: str) -> TurnQuerySet:
        """Pending turns of ``tenant`` at the head of their lane submitted before the turn
        ``pk`` (submitted at ``submitted_at``): they take the tenant's free places before it,
        as :meth:`within_tenant_limit` orders them."""
        return self.lane_heads().filter(tenant=tenant).filter(
            Q(submitted_at__lt=submitted_at) | Q(submitted_at=submitted_at, id__lt=pk))

    def within_tenant_limit(self, limit: int) -> TurnQuerySet:
        """Those of these turns a claim would not refuse for their tenant's limit: every turn
        without a tenant, and of each tenant's, the oldest submitted, as many as it has
        fewer than ``limit`` running turns (``TENANT_LIMITS``). One statement."""
        running = type(self)(self.model).tenant_running(OuterRef("tenant")).order_by()
        count = running.values("tenant").annotate(n=Count("pk")).values("n")
        return self.annotate(
            tenant_running=Coalesce(Subquery(count), 0),
            tenant_place=Window(RowNumber(), partition_by=F("tenant"),
                                order_by=[F("submitted_at").asc(), F("id").asc()]),
        ).filter(Q(tenant__isnull=True) | Q(tenant_place__lte=limit - F("tenant_running")))

    def under_cascade(self) -> TurnQuerySet:
        """Active turns whose parent (or, for a root-level task of a tree, whose root) was
        cancelled with its descendants (for the sweep)."""
        return self.active().filter(
            Q(parent_turn__status=TurnStatus.CANCELLED, parent_turn__options__cancel_cascade=True)
            | Q(parent_turn__isnull=True, root_turn__status=TurnStatus.CANCELLED,
                root_turn__options__cancel_cascade=True))


class _ProviderSafe(ModelIterable):
    """Rows with the provider-only parts taken out of ``content`` (in memory, never saved)."""

    def __iter__(self) -> Iterator[Any]:
        for message in super().__iter__():
            message.content = [part for part in message.content or []
                               if part.get("kind") not in PRIVATE_PART_KINDS]
            yield message


class MessageQuerySet(models.QuerySet):
    def visible_to(self, turn: TurnRow) -> MessageQuerySet:
        """The messages ``turn`` sees: its conversation up to its frozen input, plus its own."""
        return self.filter(conversation_id=turn.conversation_id).filter(
            Q(sequence__lte=turn.context_sequence) | Q(turn_id=turn.pk)).order_by("sequence")

    def deliveries_after(self, conversation_id: str | Combinable,
                         sequence: int | Combinable) -> MessageQuerySet:
        """Delivered messages past ``sequence`` (buffered for the next turn), oldest first."""
        return self.filter(conversation_id=conversation_id, sequence__gt=sequence, role="user",
                           metadata__has_key="delivery_id").order_by("sequence")

    def after(self, conversation_id: str, sequence: int) -> MessageQuerySet:
        """A cursor read: the conversation's messages with a greater sequence, in order."""
        return self.filter(conversation_id=conversation_id, sequence__gt=sequence).order_by(
            "sequence")

    def provider_safe(self) -> MessageQuerySet:
        """What applications show: no dynamic context snapshots, and thinking and opaque
        provider parts removed from each row's content (in memory; the rows are unchanged)."""
        rows = self.exclude(kind__in=sorted(PRIVATE_MESSAGE_KINDS))
        rows._iterable_class = _ProviderSafe
        return rows


class ToolExecutionQuerySet(models.QuerySet):
    def pending(self) -> ToolExecutionQuerySet:
        return self.filter(status=ToolStatus.PENDING)

    def running(self) -> ToolExecutionQuerySet:
        return self.filter(status=ToolStatus.RUNNING)

    def completed(self) -> ToolExecutionQuerySet:
        return self.filter(status=ToolStatus.COMPLETED)

    def awaiting_approval(self) -> ToolExecutionQuerySet:
        """Calls parked until a person approves or denies them (the approvals inbox)."""
        return self.filter(status=ToolStatus.PENDING, approval__state="requested")

    def approval_expired(self, now: str) -> ToolExecutionQuerySet:
        """Parked calls whose request expired before ``now`` (a stamp, as stored)."""
        return self.awaiting_approval().filter(approval__has_key="expires_at",
                                               approval__expires_at__lt=now)


class WaitQuerySet(models.QuerySet):
    def unmet(self) -> WaitQuerySet:
        """Edges whose target has not finished yet."""
        return self.filter(target__status__in=_ACTIVE)

    def between_active(self) -> WaitQuerySet:
        """Edges whose waiter and target are both unfinished (the live wait graph)."""
        return self.unmet().filter(waiter__status__in=_ACTIVE)


class DeliveryQuerySet(models.QuerySet):
    def pending(self) -> DeliveryQuerySet:
        return self.filter(delivered_at__isnull=True)
