"""Reads of a tenant's places under its ``TENANT_LIMITS`` concurrency (the runtime's doorbell
asks them before it rings)."""

from __future__ import annotations

from datetime import datetime

from ..models import Turn


def has_room(tenant: str, submitted_at: datetime, turn_id: str, concurrency: int) -> bool:
    """Whether fewer than ``concurrency`` turns of ``tenant`` run, counting its pending turns at
    the head of their lanes submitted before ``turn_id`` (at ``submitted_at``). Two reads, each
    bounded by ``concurrency`` rows (the partial running index first)."""
    free = concurrency - Turn.objects.tenant_running(tenant).count()
    return free > 0 and Turn.objects.ahead_in_tenant(
        tenant, submitted_at, turn_id)[:free].count() < free


__all__ = ["has_room"]
