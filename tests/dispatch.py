"""The suite's in-memory dispatcher: ``turnkit_django.testing``'s shared one, under old names.

``TURNKIT["DISPATCHER"] = "tests.dispatch.record"`` makes every doorbell (submit, reconcile,
maintenance) append the turn id instead of sending a Celery message. Tests read what was
dispatched with :func:`recorded` and run the turns themselves with ``services.run_turn``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from django.test import override_settings

from turnkit_django.testing import in_memory_dispatcher

DISPATCHER = "tests.dispatch.record"

#: The dispatcher itself (a callable taking the turn id).
record = in_memory_dispatcher
recorded = in_memory_dispatcher.dispatched
clear = in_memory_dispatcher.clear


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

