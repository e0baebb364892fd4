"""Opaque, type-prefixed, time-sortable identifiers (``turn_01JH...``)."""

from __future__ import annotations

import os
import time

_ALPHABET = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"  # Crockford base32

#: The longest id a row can have (the ``max_length`` of every id column): a longer one names
#: nothing.
ID_LENGTH = 40


def _encode(value: int, length: int) -> str:
    chars = []
    for _ in range(length):
        value, rem = divmod(value, 32)
        chars.append(_ALPHABET[rem])
    return "".join(reversed(chars))


def new_id(prefix: str) -> str:
    """Return ``prefix_`` followed by a 26-character ULID: 48 bits of milliseconds, 80 random."""
    millis = time.time_ns() // 1_000_000
    randomness = int.from_bytes(os.urandom(10), "big")
    return f"{prefix}_{_encode(millis, 10)}{_encode(randomness, 16)}"
