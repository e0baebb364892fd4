"""A stand-in for a payment provider's API, with idempotency keys like real ones have.

The first request with a key records the refund; a repeat with the same key returns that refund
instead of paying twice. ``latency`` delays the answer after the refund is recorded: the money
has moved, but the caller does not know yet (what a worker killed at that moment leaves behind).
"""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction

from .models import Refund


class PaymentError(Exception):
    """The provider refused the request."""


def refund(order_id: str, amount_cents: int, *, idempotency_key: str, note: str = "",
           latency: float = 0.0) -> dict[str, Any]:
    """Refund ``amount_cents`` for ``order_id`` once per ``idempotency_key``."""
    with transaction.atomic():
        row, created = Refund.objects.get_or_create(
            idempotency_key=idempotency_key,
            defaults={"order_id": order_id, "amount_cents": amount_cents, "note": note},
        )
    if (row.order_id, row.amount_cents) != (order_id, amount_cents):
        raise PaymentError(f"idempotency key {idempotency_key!r} was used for another refund")
    if created and latency:
        time.sleep(latency)
    return {"refund": row.reference, "replayed": not created, "order_id": order_id,
            "amount_cents": amount_cents}
