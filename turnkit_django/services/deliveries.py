"""Durable messages between conversations, as use cases.

The logic is in :mod:`turnkit_django.runtime.deliveries` (turns deliver and wake too).
"""

from __future__ import annotations

from ..runtime.deliveries import deliver, send_message, wake

__all__ = ["deliver", "send_message", "wake"]
