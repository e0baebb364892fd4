"""The ``TURNKIT`` settings dict, read lazily through one object.

``from turnkit_django.conf import turnkit_settings`` then ``turnkit_settings.LEASE``. Values are
read from ``django.conf.settings.TURNKIT`` on first access and cached; the cache is dropped when
the setting changes (``override_settings`` works). Keys in ``IMPORT_STRINGS`` may be given as dotted
paths and are imported on first access. Unknown keys are reported by the system check
``turnkit.E001`` rather than at import time, so a typo cannot stop ``manage.py`` from starting.
"""

from __future__ import annotations

from decimal import Decimal
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.utils.module_loading import import_string

from .exceptions import ConfigurationError

DEFAULTS: dict[str, Any] = {
    "DEFAULT_MODEL": "claude-sonnet-4-5",
    "CLIENT": "turnkit_django.clients.AnthropicClient",
    "MAX_ITERATIONS": 25,
    "MAX_DEPTH": 3,
    "MAX_TOOL_EXECUTIONS": 100,
    "MAX_TOOL_EXECUTIONS_BY_NAME": {},
    "MAX_SPEND": None,
    "TIMEOUT": 300,
    "HEARTBEAT_INTERVAL": 10,
    "LEASE": 60,
    "RECONCILE_INTERVAL": 15,
    "MAX_RECOVERY_ATTEMPTS": 3,
    "MAINTENANCE_BATCH_SIZE": 100,
    "AUTHORIZATION_POLICY": None,
    "COST_RATES": {},
    "QUEUE": "turnkit",
    # Additions beyond the api.md table.
    "DISPATCHER": None,  # callable(turn_id) that replaces the Celery dispatch (tests, other queues)
    "COMPACTION": True,  # True, False, or a dict of compaction options
    "PROMPT_DATA_MAX_CHARS": 20_000,
    # Seconds a tool call (without a timeout of its own) or a model call may take before its
    # turn stops renewing its lease, so reconcile hands the turn to another worker.
    "TOOL_TIMEOUT": None,
    "MODEL_TIMEOUT": None,
    "MEDIA_STORAGE": None,  # alias in settings.STORAGES for generated images; None: "default"
}

IMPORT_STRINGS = frozenset({"CLIENT", "AUTHORIZATION_POLICY", "DISPATCHER"})


class TurnkitSettings:
    """Attribute access to the merged ``TURNKIT`` settings with defaults."""

    def __init__(self) -> None:
        self._cache: dict[str, Any] = {}

    @property
    def user_settings(self) -> dict[str, Any]:
        value = getattr(settings, "TURNKIT", None) or {}
        if not isinstance(value, dict):
            raise ConfigurationError("settings.TURNKIT must be a dict")
        return value

    def __getattr__(self, name: str) -> Any:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"unknown turnkit setting {name!r}")
        if name in self._cache:
            return self._cache[name]
        value = self.user_settings.get(name, DEFAULTS[name])
        if name in IMPORT_STRINGS and isinstance(value, str):
            try:
                value = import_string(value)
            except ImportError as exc:
                raise ConfigurationError(
                    f"TURNKIT[{name!r}] = {value!r} could not be imported: {exc}"
                ) from exc
        if name == "MAX_SPEND" and value is not None:
            value = Decimal(str(value))
        self._cache[name] = value
        return value

    def reload(self) -> None:
        self._cache.clear()


turnkit_settings = TurnkitSettings()


def _reload(*, setting: str, **kwargs: Any) -> None:
    if setting == "TURNKIT":
        turnkit_settings.reload()


setting_changed.connect(_reload)
