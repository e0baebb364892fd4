"""The ``TURNKIT`` keys: each one's default (``DEFAULTS``) and the cleaner that validates and
normalises its value (``CLEANERS``), for :mod:`turnkit_django.conf`, which reads the setting and
re-exports every name defined here.

A cleaner takes ``(key, value)`` and returns the normalised value or raises
:class:`InvalidSetting` with the problem's system check id; ``label`` (where a cleaner takes one)
names an option that overrides the setting, for per-call limits checked the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import replace
from decimal import Decimal, InvalidOperation
from typing import NamedTuple

from django.core.files.storage import storages
from django.utils.module_loading import import_string

from .delta_channel import clean_delta_channel
from .deltas import clean_streaming
from .provider_settings import clean_provider_limits, clean_redis_url
from .setting_errors import InvalidSetting, SettingProblem
from .trace_settings import clean_tracing

DEFAULTS: dict[str, object] = {
    "DEFAULT_MODEL": "claude-sonnet-5-5",
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
    # callable(usage, model) -> Decimal | number | None pricing a model call before COST_RATES
    # (None: use the rates); import path or callable.
    "COST_CALCULATOR": None,
    "MEDIA_STORAGE": None,  # alias in settings.STORAGES for generated images; None: "default"
    "PROVIDER_LIMITS": {}, "LIMITS_REDIS_URL": None,  # see provider_settings.py
    "TENANT_LIMITS": None,  # {"key": callable(principal) -> str | None, "concurrency": N}
    "STREAMING": True,  # ask providers to stream to on_delta= listeners (deltas.py)
    "TRACING": False,  # True or {"capture_content": True}: OpenTelemetry spans (trace_settings)
    "DELTA_CHANNEL": None,  # where background deltas travel (delta_channel.py)
}

IMPORT_STRINGS = frozenset({"CLIENT", "AUTHORIZATION_POLICY", "DISPATCHER", "COST_CALCULATOR"})

#: Seconds settings: positive, finite, and at most ten years (so deadlines stay representable).
SECONDS = ("TIMEOUT", "HEARTBEAT_INTERVAL", "LEASE", "RECONCILE_INTERVAL")
OPTIONAL_SECONDS = ("TOOL_TIMEOUT", "MODEL_TIMEOUT")  # the same, or None
MAX_SECONDS = 10 * 365 * 24 * 3600
#: Count settings and their smallest allowed value; the largest is a database integer's.
COUNTS = {"MAX_ITERATIONS": 1, "MAX_TOOL_EXECUTIONS": 1, "MAINTENANCE_BATCH_SIZE": 1,
          "PROMPT_DATA_MAX_CHARS": 1, "MAX_DEPTH": 0, "MAX_RECOVERY_ATTEMPTS": 0}
MAX_COUNT = 2**31 - 1


def _name(key: str, label: str | None) -> str:
    """How a message names the value: the setting, or ``label`` (an option overriding it)."""
    return label or f"TURNKIT[{key!r}]"


def _invalid(id_: str, key: str, value: object, expected: str, hint: str,
             label: str | None = None) -> InvalidSetting:
    return InvalidSetting(SettingProblem(
        id_, key, f"{_name(key, label)} must be {expected}; got {value!r}.", hint))


def _seconds(key: str, value: object, label: str | None = None) -> float:
    if (isinstance(value, int | float) and not isinstance(value, bool)
            and math.isfinite(value) and 0 < value <= MAX_SECONDS):
        return float(value)
    raise _invalid("turnkit.E003", key, value,
                   f"a positive number of seconds up to {MAX_SECONDS} (ten years)",
                   f"Use a number such as {DEFAULTS[key] or 60!r}"
                   f"{' (the default)' if DEFAULTS[key] else ', or None for no limit'}.", label)


def _optional_seconds(key: str, value: object) -> float | None:
    return None if value is None else _seconds(key, value)


def _count(key: str, value: object, label: str | None = None) -> int:
    minimum = COUNTS[key]
    if isinstance(value, bool) or not isinstance(value, int) or not minimum <= value <= MAX_COUNT:
        expected = (f"a positive integer up to {MAX_COUNT}" if minimum
                    else f"an integer from 0 to {MAX_COUNT}")
        raise _invalid("turnkit.E003", key, value, expected,
                       f"Use a whole number such as {DEFAULTS[key]!r} (the default).", label)
    return value


def _spend(key: str, value: object, label: str | None = None) -> Decimal | None:
    if value is None:
        return None
    amount: Decimal | None = None
    if isinstance(value, Decimal | int | float | str) and not isinstance(value, bool):
        try:
            amount = Decimal(str(value).strip())
        except InvalidOperation:
            amount = None
    if amount is None or not amount.is_finite() or amount < 0:
        raise _invalid("turnkit.E011", key, value, "None or an amount of USD >= 0",
                       "Use a decimal string such as '5.00', or None for no cap.", label)
    return amount


def _by_name(key: str, value: object, label: str | None = None) -> Mapping[str, int]:
    if not isinstance(value, Mapping):
        raise _invalid("turnkit.E008", key, value, "a dict of tool name -> maximum executions",
                       "For example {'search_docs': 3}.", label)
    for name, cap in value.items():
        if not isinstance(name, str) or not name:
            raise _invalid("turnkit.E008", key, value, "keyed by tool names (strings)",
                           f"The entry {name!r}: {cap!r} is not keyed by a tool name.", label)
        if isinstance(cap, bool) or not isinstance(cap, int) or not 0 <= cap <= MAX_COUNT:
            raise InvalidSetting(SettingProblem(
                "turnkit.E008", key,
                f"{_name(key, label)}[{name!r}] must be an integer from 0 to {MAX_COUNT}; "
                f"got {cap!r}.",
                f"For example {{{name!r}: 3}}; 0 forbids the tool."))
    return dict(value)


def _text(key: str, value: object) -> str:
    if not isinstance(value, str) or not value.strip():
        raise _invalid("turnkit.E012", key, value, "a non-empty string",
                       f"For example {DEFAULTS[key]!r} (the default).")
    return value


#: The longest model name the ``model`` columns hold.
MODEL_LENGTH = 200


def _model(key: str, value: object) -> str:
    name = _text(key, value)
    if name != name.strip() or len(name) > MODEL_LENGTH:
        raise _invalid("turnkit.E012", key, value, "a model name without surrounding "
                       f"whitespace, of at most {MODEL_LENGTH} characters (what the model "
                       "columns hold)",
                       f"For example {DEFAULTS[key]!r} (the default).")
    return name


def _queue(key: str, value: object) -> str:
    name = _text(key, value)
    if any(char.isspace() or char == "," for char in name):
        raise _invalid("turnkit.E012", key, value, "a queue name without spaces or commas",
                       "Workers consume it with `celery worker -Q <queue>`, where a comma "
                       "separates queues and a shell splits at spaces; use a name such as "
                       "'turnkit' (the default).")
    return name


def _mapping(id_: str, hint: str) -> Callable[[str, object], Mapping[str, object]]:
    def clean(key: str, value: object) -> Mapping[str, object]:
        if not isinstance(value, Mapping):
            raise _invalid(id_, key, value, "a dict", hint)
        return value

    return clean


def _storage_alias(key: str, value: object) -> str | None:
    if value is not None and (not isinstance(value, str) or value not in storages.backends):
        raise _invalid("turnkit.E021", key, value, "None or an alias of settings.STORAGES",
                       "Add the alias to STORAGES, or leave MEDIA_STORAGE out to keep generated "
                       "images in the default storage.")
    return value


def _compaction(key: str, value: object) -> bool | Mapping[str, object]:
    # None is refused like every setting whose default is not None (E003 for TIMEOUT): here it
    # was read as True, so COMPACTION = None meant to switch compaction off left it on.
    if not isinstance(value, bool | Mapping):
        raise _invalid("turnkit.E020", key, value, "True, False or a dict of options",
                       "For example {'context_limit': 128000, 'threshold': 0.75}; use False "
                       "to switch compaction off, or leave COMPACTION out for the default "
                       "(True).")
    return value


def _imported(key: str, value: object) -> object:
    if not isinstance(value, str):
        return value
    try:
        return import_string(value)
    except Exception as exc:  # ImportError, or anything the imported module raised
        raise InvalidSetting(SettingProblem(
            "turnkit.E007", key, f"TURNKIT[{key!r}] = {value!r} could not be imported: {exc}",
            f"Fix the dotted path in TURNKIT[{key!r}] (module.attribute), or pass the object."
        )) from exc


class TenantLimits(NamedTuple):
    """``TENANT_LIMITS`` cleaned: the principal's tenant key, and its running turns at most."""

    key: Callable[[object], str | None]
    concurrency: int


def _tenant_limits(key: str, value: object) -> TenantLimits | None:
    hint = ("For example {'key': 'myapp.limits.tenant_of', 'concurrency': 20}: a callable "
            "(or its import path) taking a principal and returning its tenant key or None, and "
            "the most running background turns one tenant may have.")
    if value is None:
        return None
    if not isinstance(value, Mapping) or set(value) != {"key", "concurrency"}:
        raise _invalid("turnkit.E023", key, value, "None or a dict of 'key' and 'concurrency'",
                       hint)
    try:
        tenant_of, concurrency = _imported(key, value["key"]), value["concurrency"]
    except InvalidSetting as exc:
        raise InvalidSetting(replace(exc.problem, message=f"TURNKIT[{key!r}]['key'] of {value!r} "
                                     f"could not be imported: {exc.__cause__}")) from exc
    if not callable(tenant_of) or isinstance(concurrency, bool) or not isinstance(
            concurrency, int) or not 1 <= concurrency <= MAX_COUNT:
        raise _invalid("turnkit.E023", key, value, "a callable 'key' (or its import path) and "
                       f"a 'concurrency' from 1 to {MAX_COUNT}", hint)
    return TenantLimits(tenant_of, concurrency)


def _client(key: str, value: object) -> object:
    obj = _imported(key, value)
    if not callable(obj) and not hasattr(obj, "complete"):
        raise _invalid("turnkit.E013", key, value,
                       "a client (an object with complete(request)), a client class or factory, "
                       "or the import path of one",
                       "For example 'turnkit_django.clients.AnthropicClient'.")
    return obj


def _callable(hint: str) -> Callable[[str, object], object]:
    def clean(key: str, value: object) -> object:
        obj = _imported(key, value)
        if obj is not None and not callable(obj):
            raise _invalid("turnkit.E013", key, value, "None, a callable or its import path", hint)
        return obj

    return clean


CLEANERS: dict[str, Callable[[str, object], object]] = {
    **dict.fromkeys(SECONDS, _seconds),
    **dict.fromkeys(OPTIONAL_SECONDS, _optional_seconds),
    **dict.fromkeys(COUNTS, _count),
    "DEFAULT_MODEL": _model,
    "QUEUE": _queue,
    "CLIENT": _client,
    "AUTHORIZATION_POLICY": _callable("For example 'myapp.policies.allow' taking "
                                      "(action, *, principal, **resources)."),
    "DISPATCHER": _callable("For example 'turnkit_django.testing.in_memory_dispatcher', or a "
                            "function taking (turn_id)."),
    "MAX_SPEND": _spend,
    "MAX_TOOL_EXECUTIONS_BY_NAME": _by_name,
    "COST_RATES": _mapping("turnkit.E006", "Rates are USD per million tokens: "
                           "{'my-model': {'input': '3', 'output': '15'}}."),
    "COMPACTION": _compaction,
    "COST_CALCULATOR": _callable("For example 'myapp.costs.price' taking (usage, model) and "
                                 "returning a Decimal, a number or None."),
    "MEDIA_STORAGE": _storage_alias,
    "PROVIDER_LIMITS": clean_provider_limits, "LIMITS_REDIS_URL": clean_redis_url,
    "TENANT_LIMITS": _tenant_limits,
    "STREAMING": clean_streaming,
    "TRACING": clean_tracing,
    "DELTA_CHANNEL": clean_delta_channel,
}
