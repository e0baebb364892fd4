"""System checks: every misconfiguration we can detect has an id and a hint.

Errors ``turnkit.E0xx`` stop ``manage.py``; warnings ``turnkit.W0xx`` are printed.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.core.files.storage import storages
from django.db import connections

from .agents.compaction import check_options as check_compaction
from .clients import default_client
from .clients.cost import validate_rates
from .conf import DEFAULTS, turnkit_settings


def _user() -> dict[str, Any]:
    value = getattr(settings, "TURNKIT", None)
    return value if isinstance(value, dict) else {}


@register(Tags.compatibility)
def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    raw = getattr(settings, "TURNKIT", None)
    if raw is not None and not isinstance(raw, dict):
        return [Error("settings.TURNKIT must be a dict.", hint="TURNKIT = {'LEASE': 60, ...}",
                      id="turnkit.E002")]
    for key in sorted(set(_user()) - set(DEFAULTS)):
        close = [k for k in DEFAULTS if k.replace("_", "") == key.upper().replace("_", "")]
        hint = f"Did you mean {close[0]!r}?" if close else (
            "Known keys: " + ", ".join(sorted(DEFAULTS)))
        messages.append(Error(f"Unknown TURNKIT setting {key!r}.", hint=hint, id="turnkit.E001"))

    def number(name: str, *, minimum: float = 0, integer: bool = False) -> float | None:
        value = _user().get(name, DEFAULTS[name])
        ok = isinstance(value, int | float) and not isinstance(value, bool) and value > minimum
        if integer:
            ok = ok and isinstance(value, int)
        if not ok:
            kind = "a positive integer" if integer else "a positive number of seconds"
            messages.append(Error(f"TURNKIT[{name!r}] must be {kind}, got {value!r}.",
                                  hint=f"Default: {DEFAULTS[name]!r}.", id="turnkit.E003"))
            return None
        return float(value)

    heartbeat = number("HEARTBEAT_INTERVAL")
    lease = number("LEASE")
    reconcile = number("RECONCILE_INTERVAL")
    number("TIMEOUT")
    for name in ("MAX_ITERATIONS", "MAX_TOOL_EXECUTIONS", "MAINTENANCE_BATCH_SIZE",
                 "MAX_RECOVERY_ATTEMPTS", "MAX_DEPTH"):
        number(name, minimum=-1 if name in ("MAX_DEPTH", "MAX_RECOVERY_ATTEMPTS") else 0,
               integer=True)
    if heartbeat and lease and lease < 3 * heartbeat:
        messages.append(Error(
            f"TURNKIT['LEASE'] ({lease:g}s) must be at least 3 x HEARTBEAT_INTERVAL "
            f"({heartbeat:g}s).",
            hint="A worker would be presumed dead after missing fewer than three heartbeats; "
                 "raise LEASE or lower HEARTBEAT_INTERVAL.",
            id="turnkit.E004"))
    if reconcile and lease and reconcile >= lease:
        messages.append(Error(
            f"TURNKIT['RECONCILE_INTERVAL'] ({reconcile:g}s) must be shorter than LEASE "
            f"({lease:g}s).",
            hint="Reconcile more often than the lease so dead workers are noticed in time.",
            id="turnkit.E005"))
    number("PROMPT_DATA_MAX_CHARS", integer=True)
    try:
        check_compaction(_user().get("COMPACTION", DEFAULTS["COMPACTION"]), "TURNKIT['COMPACTION']")
    except Exception as exc:
        messages.append(Error(str(exc), hint="Use True, False, or a dict such as "
                              "{'context_limit': 128000, 'threshold': 0.75}.", id="turnkit.E020"))
    for problem in validate_rates(_user().get("COST_RATES", {})):
        messages.append(Error(problem, hint="Rates are USD per million tokens: "
                              "{'input': '3', 'output': '15', 'cache_read': '0.3', "
                              "'cache_write': '3.75'}.", id="turnkit.E006"))
    for name in ("CLIENT", "AUTHORIZATION_POLICY", "DISPATCHER"):
        try:
            getattr(turnkit_settings, name)
        except Exception as exc:
            messages.append(Error(str(exc), hint=f"Fix the import path in TURNKIT[{name!r}].",
                                  id="turnkit.E007"))
    by_name = _user().get("MAX_TOOL_EXECUTIONS_BY_NAME", {})
    if not isinstance(by_name, dict) or not all(
        isinstance(v, int) and v >= 0 for v in by_name.values()
    ):
        messages.append(Error("TURNKIT['MAX_TOOL_EXECUTIONS_BY_NAME'] must map tool names to "
                              "non-negative integers.", hint="{'search_docs': 3}",
                              id="turnkit.E008"))
    media_storage = _user().get("MEDIA_STORAGE")
    if media_storage is not None and (not isinstance(media_storage, str)
                                      or media_storage not in storages.backends):
        messages.append(Error(
            f"TURNKIT['MEDIA_STORAGE'] = {media_storage!r} is not an alias of settings.STORAGES.",
            hint="Add the alias to STORAGES, or leave MEDIA_STORAGE out to keep generated images "
                 "in the default storage.", id="turnkit.E021"))
    return messages


@register(Tags.database)
def check_sqlite_mode(app_configs: Sequence[Any] | None = None,
                      **kwargs: Any) -> list[CheckMessage]:
    messages: list[CheckMessage] = []
    for alias in settings.DATABASES:
        conn = connections[alias]
        if conn.vendor != "sqlite":
            continue
        mode = (conn.settings_dict.get("OPTIONS") or {}).get("transaction_mode")
        if str(mode).upper() != "IMMEDIATE":
            messages.append(Error(
                f"Database {alias!r} is SQLite without the IMMEDIATE transaction mode.",
                hint=f"Set DATABASES[{alias!r}]['OPTIONS'] = {{'transaction_mode': 'IMMEDIATE'}} "
                     "so writers serialize; without it concurrent turns can corrupt claims.",
                id="turnkit.E010"))
    return messages


@register(Tags.compatibility, deploy=True)
def check_client_credentials(app_configs: Sequence[Any] | None = None,
                             **kwargs: Any) -> list[CheckMessage]:
    """Warn when the configured model client has no credentials (deploy checks only)."""
    try:
        client = default_client()
    except Exception as exc:
        return [Error(f"TURNKIT['CLIENT'] could not be built: {exc}",
                      hint="Check the import path and the client's constructor arguments.",
                      id="turnkit.E009")]
    missing = getattr(client, "missing_credentials", None)
    problem = missing() if callable(missing) else None
    if not problem:
        return []
    return [Warning(f"The model client {type(client).__name__} has no credentials: {problem}.",
                    hint="Set the provider's API key in the environment of every web and "
                         "worker process.", id="turnkit.W003")]


@register(Tags.compatibility, deploy=True)
def check_celery(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when the project's Celery app will not run reconciliation or route our tasks."""
    try:
        from celery import current_app  # noqa: PLC0415 - celery is an optional extra
    except ImportError:  # pragma: no cover
        return []
    app = current_app._get_current_object()  # type: ignore[attr-defined]
    if app.main in (None, "default", "__main__") and not app.conf.get("beat_schedule"):
        return []  # no project Celery app configured in this process
    messages: list[CheckMessage] = []
    tasks = {entry.get("task") for entry in (app.conf.beat_schedule or {}).values()}
    if "turnkit.reconcile" not in tasks:
        messages.append(Warning(
            "The Celery beat schedule has no turnkit.reconcile entry.",
            hint="Merge turnkit_django.celery.beat_schedule() into app.conf.beat_schedule, or "
                 "run `manage.py turnkit_reconcile --loop`; without it turns whose worker died "
                 "are never recovered.",
            id="turnkit.W001"))
    queue = turnkit_settings.QUEUE
    routes = app.conf.task_routes or {}
    routed = isinstance(routes, dict) and any(
        key in routes and (routes[key] or {}).get("queue") == queue
        for key in ("turnkit.*", "turnkit.reconcile", "turnkit.maintain")
    )
    if not routed and app.conf.task_default_queue != queue:
        messages.append(Warning(
            f"turnkit's maintenance tasks are not routed to the queue {queue!r}.",
            hint=f"Add task_routes = {{'turnkit.*': {{'queue': {queue!r}}}}} and start workers "
                 f"with -Q {queue}.",
            id="turnkit.W002"))
    return messages
