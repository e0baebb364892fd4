"""An in-memory dispatcher for background tests, so no Celery broker is needed.

``TURNKIT["DISPATCHER"] = "tests.dispatch.record"`` makes every doorbell (submit, reconcile,
maintenance) append the turn id here instead of sending a Celery message. Tests read what was
dispatched with :func:`recorded` and run the turns themselves with ``services.run_turn``.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

DISPATCHER = "tests.dispatch.record"

_lock = threading.Lock()
_recorded: list[str] = []


def record(turn_id: str) -> None:
    """The dispatcher: remember ``turn_id`` (thread-safe)."""
    with _lock:
        _recorded.append(turn_id)


def recorded() -> list[str]:
    """Every turn id dispatched since the last :func:`clear`, in dispatch order."""
    with _lock:
        return list(_recorded)


def clear() -> None:
    with _lock:
        _recorded.clear()


def override_turnkit(**values: Any) -> override_settings:
    """``override_settings`` for TURNKIT keys, merged over the test settings and the recorder."""
    return override_settings(TURNKIT={**settings.TURNKIT, "DISPATCHER": DISPATCHER, **values})


@pytest.fixture
def background() -> Iterator[None]:
    """Dispatch into the in-memory recorder for one test (import it in a conftest)."""
    clear()
    with override_turnkit():
        yield
    clear()
