"""The "studio" agent: the painter specialist, making a picture of a replacement item.

Every paid generation passes the application's gate first: here a per-user credit count (in a
real app, a row you lock and decrement, or a billing check). The gate must return the literal
True; anything else refuses, and the model is told so. The images come from a test media client
so the demo needs no network; use ``image_provider="openai"`` (and ``OPENAI_API_KEY``) for real
ones. They are saved in the default storage (``MEDIA_ROOT``), never in a database column.
"""

from __future__ import annotations

import threading
from typing import Any

from turnkit_django import register
from turnkit_django.specialists import painter
from turnkit_django.testing import FunctionMediaClient

#: Image credits by user; the demo starts with one for "demo".
CREDITS: dict[str, int] = {"demo": 1}
_lock = threading.Lock()


def spend_credit(*, principal: Any, **request: Any) -> bool:
    """The gate: allow one generation per credit of the principal's user."""
    user = (principal or {}).get("user")
    with _lock:
        if CREDITS.get(user, 0) < 1:
            return False
        CREDITS[user] -= 1
        return True


studio = register(painter(
    name="studio",
    model="scripted-support",
    image_model="gpt-image-1",
    size="1024x1024",
    gate=spend_credit,
    image_client=FunctionMediaClient(),
    max_reference_images=2,
    max_iterations=4,
))
