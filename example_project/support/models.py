"""The example's own data: a refund ledger, so side effects can be counted."""

from __future__ import annotations

from django.db import models


class Refund(models.Model):
    """One refund as the payment provider recorded it; one row per idempotency key."""

    order_id = models.CharField(max_length=40)
    amount_cents = models.PositiveIntegerField()
    note = models.TextField(blank=True, default="")
    idempotency_key = models.CharField(max_length=100, unique=True)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        ordering = ["created_at"]

    def __str__(self) -> str:
        return f"refund {self.reference} of {self.amount_cents} cents for order {self.order_id}"

    @property
    def reference(self) -> str:
        return f"rf_{self.pk:05d}"
