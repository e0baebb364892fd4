"""The ``TURNKIT`` settings dict, read lazily through one typed object.

``from turnkit_django.conf import turnkit_settings`` then ``turnkit_settings.LEASE`` (a
``float``). Values are read from ``django.conf.settings.TURNKIT`` on first access, validated,
normalised (numbers of seconds become ``float``, ``MAX_SPEND`` a ``Decimal``) and cached; the cache
is dropped when the setting changes (``override_settings`` works). Keys in ``IMPORT_STRINGS`` may be
given as dotted paths and are imported on first access.

Nothing here raises at import time. A bad value raises :class:`InvalidSetting` (a
``ConfigurationError``) when it is read, and the system checks (``turnkit_django.checks``) report
every bad value with its id through :func:`problems`, so a typo cannot stop ``manage.py`` from
starting. The keys' defaults and the cleaner of each value are in
:mod:`turnkit_django.conf.setting_values`.
"""

from __future__ import annotations

import difflib
from collections.abc import Callable, Mapping
from decimal import Decimal

from django.conf import settings
from django.core.signals import setting_changed

from .delta_channel import clean_delta_channel  # noqa: F401 - importable from here, as before
from .deltas import clean_streaming  # noqa: F401 - importable from here, as before
from .provider_settings import (  # noqa: F401 - importable from here, as before
    clean_provider_limits,
    clean_redis_url,
)
from .setting_errors import InvalidSetting, SettingProblem
from .setting_values import (  # noqa: F401 - every name defined there, importable from here
    CLEANERS,
    COUNTS,
    DEFAULTS,
    IMPORT_STRINGS,
    MAX_COUNT,
    MAX_SECONDS,
    MODEL_LENGTH,
    OPTIONAL_SECONDS,
    SECONDS,
    TenantLimits,
    _by_name,
    _callable,
    _client,
    _compaction,
    _count,
    _imported,
    _invalid,
    _mapping,
    _model,
    _name,
    _optional_seconds,
    _queue,
    _seconds,
    _spend,
    _storage_alias,
    _tenant_limits,
    _text,
)
from .trace_settings import TracingOptions, clean_tracing  # noqa: F401 - as before


def _as_is(key: str, value: object) -> object:
    """A key without a cleaner yet (tests/unit/test_settings_checks.py requires one)."""
    return value


def raw_settings() -> Mapping[object, object]:
    """Return ``settings.TURNKIT`` as given (missing or None: empty); raise if it is no dict."""
    value = getattr(settings, "TURNKIT", None)
    if value is None:
        return {}
    if not isinstance(value, Mapping):
        raise InvalidSetting(SettingProblem(
            "turnkit.E002", "TURNKIT", f"settings.TURNKIT must be a dict; got {value!r}.",
            "Write TURNKIT = {'LEASE': 60, ...} (keys as in the settings reference)."))
    return value


def suggest(key: object) -> str | None:
    """Return the known key closest to an unknown one (``LEASES`` -> ``LEASE``), if any."""
    if not isinstance(key, str):
        return None
    wanted = key.upper().replace("-", "_").replace(" ", "_")
    if wanted in DEFAULTS:
        return wanted
    squashed = {k.replace("_", ""): k for k in DEFAULTS}
    if wanted.replace("_", "") in squashed:
        return squashed[wanted.replace("_", "")]
    close = difflib.get_close_matches(wanted, DEFAULTS, n=1, cutoff=0.75)
    return close[0] if close else None


def problems() -> list[SettingProblem]:
    """Every bad value in ``settings.TURNKIT``, one problem per key (never raises)."""
    try:
        raw = raw_settings()
    except InvalidSetting as exc:
        return [exc.problem]
    found: list[SettingProblem] = []
    for key in sorted(set(raw) - set(DEFAULTS), key=repr):
        close = suggest(key)
        found.append(SettingProblem(
            "turnkit.E001", str(key), f"Unknown TURNKIT setting {key!r}.",
            f"Did you mean {close!r}?" if close else "Known keys: " + ", ".join(sorted(DEFAULTS))
            + "."))
    for key, clean in CLEANERS.items():
        try:
            clean(key, raw.get(key, DEFAULTS[key]))
        except InvalidSetting as exc:
            found.append(exc.problem)
    return found


class TurnkitSettings:
    """Typed attribute access to the merged ``TURNKIT`` settings with defaults.

    The annotations below have no class values, so every read goes through ``__getattr__``
    (validated, normalised, cached) while type checkers see the precise type of each key.
    """

    DEFAULT_MODEL: str
    CLIENT: object  # a client instance, or a class or factory that returns one
    MAX_ITERATIONS: int
    MAX_DEPTH: int
    MAX_TOOL_EXECUTIONS: int
    MAX_TOOL_EXECUTIONS_BY_NAME: Mapping[str, int]
    MAX_SPEND: Decimal | None
    TIMEOUT: float
    HEARTBEAT_INTERVAL: float
    LEASE: float
    RECONCILE_INTERVAL: float
    MAX_RECOVERY_ATTEMPTS: int
    MAINTENANCE_BATCH_SIZE: int
    AUTHORIZATION_POLICY: Callable[..., object] | None
    COST_RATES: Mapping[str, object]
    QUEUE: str
    DISPATCHER: Callable[[str], object] | None
    COMPACTION: bool | Mapping[str, object]
    PROMPT_DATA_MAX_CHARS: int
    TOOL_TIMEOUT: float | None
    MODEL_TIMEOUT: float | None
    COST_CALCULATOR: Callable[..., object] | None
    MEDIA_STORAGE: str | None
    PROVIDER_LIMITS: Mapping[str, Mapping[str, int]]
    LIMITS_REDIS_URL: str | None
    TENANT_LIMITS: TenantLimits | None
    STREAMING: bool
    TRACING: TracingOptions | None
    DELTA_CHANNEL: str | None

    def __init__(self) -> None:
        self._cache: dict[str, object] = {}

    @property
    def user_settings(self) -> Mapping[object, object]:
        return raw_settings()

    def __getattr__(self, name: str) -> object:
        if name.startswith("_") or name not in DEFAULTS:
            raise AttributeError(f"unknown turnkit setting {name!r}")
        if name in self._cache:
            return self._cache[name]
        clean = CLEANERS.get(name, _as_is)
        value = clean(name, raw_settings().get(name, DEFAULTS[name]))
        self._cache[name] = value
        return value

    def reload(self) -> None:
        self._cache.clear()


turnkit_settings = TurnkitSettings()


def _reload(*, setting: str, **kwargs: object) -> None:
    if setting in ("TURNKIT", "STORAGES"):  # MEDIA_STORAGE is checked against STORAGES
        turnkit_settings.reload()


setting_changed.connect(_reload)
