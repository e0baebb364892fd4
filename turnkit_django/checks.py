"""System checks: every misconfiguration we can detect has an id and a hint.

Errors ``turnkit.E0xx`` stop ``manage.py``; warnings ``turnkit.W0xx`` are printed. Every check
also carries the tag ``turnkit``, so ``manage.py check --tag turnkit`` runs only these. None of
them touches the database: they read settings, the agent registry, the installed provider SDK and
the Celery app (and whether a ``filesystem://`` broker's folders exist), and they never raise,
whatever ``settings.TURNKIT`` holds.
"""

from __future__ import annotations

import sys
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from django.conf import settings
from django.core.checks import CheckMessage, Error, Tags, Warning, register
from django.db import connections
from django.utils import timezone

from .agents.compaction import check_options as check_compaction
from .agents.compaction import merged_options
from .agents.registry import registered_agents
from .base.beat import beat_problem
from .base.brokers import FILESYSTEM_HINT, broker_problem, filesystem_problem
from .clients import default_client, is_test_client
from .clients.cost import validate_rates
from .clients.model_deprecations import end_of_life as end_of_life  # importable from here
from .clients.model_deprecations import model_messages, sdk_deprecations
from .conf import problems, turnkit_settings
from .exceptions import ConfigurationError

try:  # optional SDK: the Celery checks are skipped without it
    import celery
    import celery.app.routes
    import celery.local
    import celery.signals
except ImportError:  # pragma: no cover - celery is an optional extra
    celery = None  # type: ignore[assignment]

TAG = "turnkit"
RUN_TURN = "turnkit.run_turn"
TASK_MODULES = frozenset({"turnkit_django.tasks", "turnkit_django.celery"})


def _setting(key: str) -> Any:
    """The validated value of ``key``, or None when it is invalid (reported by check_settings)."""
    try:
        return getattr(turnkit_settings, key)
    except ConfigurationError:
        return None


# --------------------------------------------------------------------------- settings


@register(Tags.compatibility, TAG)
def check_settings(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Report unknown keys and bad values (E001-E008, E011-E013, E020, E021, E023)."""
    found = problems()
    messages: list[CheckMessage] = [Error(p.message, hint=p.hint, id=p.id) for p in found]
    if any(p.id == "turnkit.E002" for p in found):
        return messages
    bad = {p.key for p in found}
    heartbeat, lease, reconcile = (None if key in bad else _setting(key) for key in
                                   ("HEARTBEAT_INTERVAL", "LEASE", "RECONCILE_INTERVAL"))
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
    if "COMPACTION" not in bad:
        try:
            check_compaction(_setting("COMPACTION"), "TURNKIT['COMPACTION']")
        except ConfigurationError as exc:
            messages.append(Error(str(exc), hint="Use True, False, or a dict such as "
                                  "{'context_limit': 128000, 'threshold': 0.75}.",
                                  id="turnkit.E020"))
        else:
            messages.extend(_agent_compaction())
    if "COST_RATES" not in bad:
        for problem in validate_rates(_setting("COST_RATES")):
            messages.append(Error(
                f"TURNKIT['COST_RATES']: {problem}.",
                hint="Rates are USD per million tokens: {'input': '3', 'output': '15', "
                     "'cache_read': '0.3', 'cache_write': '3.75'}.", id="turnkit.E006"))
    return messages


@register(Tags.compatibility, TAG)
def check_sqlite_mode(app_configs: Sequence[Any] | None = None,
                      **kwargs: Any) -> list[CheckMessage]:
    """Require IMMEDIATE transactions on SQLite (E010); reads settings only, not the database."""
    messages: list[CheckMessage] = []
    for alias in settings.DATABASES:
        conn = connections[alias]
        if conn.vendor != "sqlite":
            continue
        options = conn.settings_dict.get("OPTIONS") or {}
        mode = options.get("transaction_mode") if isinstance(options, Mapping) else None
        if str(mode).upper() != "IMMEDIATE":
            problem = ("" if isinstance(options, Mapping)
                       else f" (its OPTIONS must be a dict, not {type(options).__name__})")
            messages.append(Error(
                f"Database {alias!r} is SQLite without the IMMEDIATE transaction mode{problem}.",
                hint=f"Set DATABASES[{alias!r}]['OPTIONS'] = {{'transaction_mode': 'IMMEDIATE'}} "
                     "so writers serialize; without it concurrent turns can corrupt claims.",
                id="turnkit.E010"))
    return messages


# --------------------------------------------------------------------------- models
# The SDK's table of retired models and the W004/W005 messages: clients/model_deprecations.py.


def _agent_compaction() -> list[CheckMessage]:
    """E020 for a registered agent whose compaction options, laid over the setting's, leave
    no room for a request (each part valid alone)."""
    messages: list[CheckMessage] = []
    for name, agent in sorted(registered_agents().items()):
        try:
            merged_options(name, agent.compaction)
        except ConfigurationError as exc:
            messages.append(Error(str(exc), hint="Make context_limit larger than "
                                  "reserved_tokens for this agent.", id="turnkit.E020"))
    return messages


def configured_models() -> dict[str, str]:
    """Every model name the project configures, with where: DEFAULT_MODEL and agents' models."""
    models: dict[str, str] = {}
    default = _setting("DEFAULT_MODEL")
    if default:
        models[default] = "TURNKIT['DEFAULT_MODEL']"
    compaction = _setting("COMPACTION")
    if isinstance(compaction, dict) and isinstance(compaction.get("model"), str):
        models.setdefault(compaction["model"], "TURNKIT['COMPACTION']['model']")
    for name, agent in sorted(registered_agents().items()):
        if agent.model:
            models.setdefault(agent.model, f"agent {name!r}")
    return models


@register(Tags.compatibility, TAG)
def check_models(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn about configured models that the provider SDK marks deprecated or retired."""
    return model_messages(configured_models(), sdk_deprecations(), timezone.now().date())


# --------------------------------------------------------------------------- deploy


@register(Tags.compatibility, TAG, deploy=True)
def check_client_credentials(app_configs: Sequence[Any] | None = None,
                             **kwargs: Any) -> list[CheckMessage]:
    """Warn when the configured model client has no credentials (deploy checks only)."""
    if any(p.key == "CLIENT" or p.id == "turnkit.E002" for p in problems()):
        return []  # reported by check_settings
    try:
        client = default_client()
    except Exception as exc:
        return [Error(f"TURNKIT['CLIENT'] could not be built: {exc}",
                      hint="Check the import path and the client's constructor arguments.",
                      id="turnkit.E009")]
    sdk = getattr(client, "missing_sdk", None)
    if callable(sdk) and (needed := sdk()):
        return [Error(f"TURNKIT['CLIENT'] could not be built: {needed}",
                      hint="Install the provider's extra in every web and worker process.",
                      id="turnkit.E009")]
    missing = getattr(client, "missing_credentials", None)
    problem = missing() if callable(missing) else None
    if not problem:
        return []
    return [Warning(f"The model client {type(client).__name__} has no credentials: {problem}.",
                    hint="Set the provider's API key in the environment of every web and "
                         "worker process.", id="turnkit.W003")]


@register(Tags.compatibility, TAG, deploy=True)
def check_test_clients(app_configs: Sequence[Any] | None = None,
                       **kwargs: Any) -> list[CheckMessage]:
    """W010 for a test client as TURNKIT['CLIENT'] or as a registered agent's client."""
    found = [(f"agent {name!r}'s client", agent.client) for name, agent
             in sorted(registered_agents().items()) if agent.client is not None]
    if not any(p.key == "CLIENT" or p.id == "turnkit.E002" for p in problems()):
        try:
            found.insert(0, ("TURNKIT['CLIENT']", default_client()))
        except Exception:  # noqa: S110 - E009 reports it
            pass
    return [Warning(f"{where} is {type(client).__name__}, a test client from "
                    "turnkit_django.testing: no model is ever called.",
                    hint="Use a provider client (turnkit_django.clients.AnthropicClient) in "
                         "production; keep test clients to the test settings.",
                    id="turnkit.W010") for where, client in found if is_test_client(client)]


# --------------------------------------------------------------------------- Celery


def _celery_app() -> Any:
    """The Celery app this process sends through (thread-local current, else the default)."""
    proxy: Any = celery.current_app
    return proxy._get_current_object()


def _is_fallback(app: Any) -> bool:
    """True for the app Celery makes up when the project loaded none (main name "default")."""
    return app.main in (None, "default")


def _names(value: Any) -> list[str]:
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def worker_task_modules(app: Any) -> set[str] | None:
    """The task modules a worker of ``app`` imports at start, or None if that cannot be told.

    That is ``imports``, ``include``, ``<package>.<related_name>`` for every lazy
    ``app.autodiscover_tasks()`` call (packages default to the installed Django apps) and what a
    forced one imported (``app.loader.task_modules``). Nothing is imported here.
    """
    modules = set(_names(app.conf.imports)) | set(_names(app.conf.include))
    try:
        modules.update(str(name) for name in app.loader.task_modules)
        signal: Any = celery.signals.import_modules
        autodiscover: Any = celery.Celery._autodiscover_tasks  # type: ignore[attr-defined]
        for receiver in signal._live_receivers(app):
            fun = getattr(receiver, "fun", None)
            if getattr(fun, "__func__", None) is not autodiscover:
                continue
            packages, related_name = (*tuple(receiver.args), None, "tasks")[:2]
            if callable(packages):
                packages = packages()
            if not packages:
                packages = [pkg for fixup in getattr(app, "_fixups", ())
                            if hasattr(fixup, "autodiscover_tasks")
                            for pkg in fixup.autodiscover_tasks()]
            modules.update(f"{p}.{related_name}" if related_name else str(p) for p in packages)
    except Exception:  # a Celery whose internals differ: do not guess
        return None
    return modules


def _defines_run_turn(module_names: Iterable[str]) -> bool:
    """True when one of the (already imported) modules holds the ``turnkit.run_turn`` task."""
    for name in module_names:
        module = sys.modules.get(name)
        for value in vars(module).values() if module is not None else ():
            if isinstance(value, celery.Task | celery.local.Proxy):
                try:
                    if getattr(value, "name", None) == RUN_TURN:
                        return True
                except Exception:  # noqa: S112 - a proxy that cannot resolve is not our task
                    continue
    return False


@register(Tags.compatibility, TAG)
def check_celery_app(app_configs: Sequence[Any] | None = None,
                     **kwargs: Any) -> list[CheckMessage]:
    """Warn when ``submit()`` cannot reach a worker that knows ``turnkit.run_turn`` (W006-W009)."""
    if _setting("DISPATCHER") is not None:
        return []  # turns are dispatched some other way
    if celery is None:
        return [Warning(
            "submit() cannot dispatch turns: Celery is not installed and TURNKIT['DISPATCHER'] "
            "is not set, so every submitted turn would stay pending.",
            hint="pip install 'turnkit-django[celery]' and set up the project's Celery app (see "
                 "'Running turns on Celery'), or set TURNKIT['DISPATCHER']. If this project "
                 "only runs turns inline, add 'turnkit.W009' to SILENCED_SYSTEM_CHECKS.",
            id="turnkit.W009")]
    if any(p.key == "DISPATCHER" or p.id == "turnkit.E002" for p in problems()):
        return []
    app = _celery_app()
    if _is_fallback(app):
        return [Warning(
            "submit() would send turns through Celery's default app (amqp://localhost), because "
            "no project Celery app is loaded in this process.",
            hint="Load your Celery app when Django starts: in the project package's __init__.py "
                 "add `from .celery import app as celery_app`. Or set TURNKIT['DISPATCHER'] if "
                 "you do not run turns on Celery.",
            id="turnkit.W006")]
    messages: list[CheckMessage] = []
    scheme = str(app.conf.broker_url or "amqp://").split("://", 1)[0]
    problem = broker_problem(app)
    if problem:
        messages.append(Warning(
            f"The Celery broker ({scheme}://) cannot be used: {problem}.",
            hint="Install its client library: pip install 'turnkit-django[redis]' for redis://, "
                 "or the celery extra named for your broker.",
            id="turnkit.W008"))
    elif scheme == "filesystem" and (problem := filesystem_problem(app)):
        messages.append(Warning(f"The Celery broker (filesystem://) cannot be used: {problem}.",
                                hint=FILESYSTEM_HINT, id="turnkit.W008"))
    modules = worker_task_modules(app)
    if modules is not None and not (modules & TASK_MODULES) and not _defines_run_turn(modules):
        messages.append(Warning(
            f"The Celery app {app.main!r} does not load {RUN_TURN}: its workers would discard "
            "every background turn as an unregistered task.",
            hint="Call app.autodiscover_tasks() in your Celery module (it finds "
                 "turnkit_django.tasks), or add 'turnkit_django.tasks' to CELERY_IMPORTS.",
            id="turnkit.W007"))
    return messages


ROUTED = ("turnkit.reconcile", "turnkit.maintain")


def routes_to(routes: Any, queue: str | None) -> bool | None:
    """Whether ``task_routes`` sends turnkit's tasks to ``queue``; None when it cannot be told.

    Celery takes a dict, or a list or tuple of routers: dicts, callables and import paths of
    callables. Only the dicts can be read, and they are read as Celery reads them: keys are
    task names, globs (``"turnkit.*"``, ``"*"``) or compiled regexes, and a route's queue is a
    name or a kombu ``Queue``. A callable or a path may route anything, so when one is present
    and no dict routes our tasks the answer is None (and no warning is given).
    """
    routers = routes if isinstance(routes, list | tuple) else [routes] if routes else []
    unreadable = False
    for router in routers:
        if not isinstance(router, dict):
            unreadable = True
            continue
        try:
            match = celery.app.routes.MapRoute(router)
            found = [match(name) for name in ROUTED]
        except Exception:  # a dict Celery itself could not use: not ours to judge
            unreadable = True
            continue
        for route in found:
            target = route.get("queue") if isinstance(route, dict) else None
            if getattr(target, "name", target) == queue:
                return True
    return None if unreadable else False


@register(Tags.compatibility, TAG, deploy=True)
def check_celery(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """Warn when the project's Celery app will not run reconciliation or route our tasks."""
    if celery is None:  # pragma: no cover - celery is an optional extra
        return []
    app = _celery_app()
    if _is_fallback(app) and not app.conf.get("beat_schedule"):
        return []  # no project Celery app configured in this process (W006 says so)
    messages: list[CheckMessage] = [Warning(
        f"The Celery beat schedule {problem}.",
        hint="Merge turnkit_django.celery.beat_schedule() into app.conf.beat_schedule (a dict "
             "of name -> entry dict), or run `manage.py turnkit_reconcile --loop`; without it "
             "turns whose worker died are never recovered.",
        id="turnkit.W001") for problem in [beat_problem(app.conf.beat_schedule)] if problem]
    queue = _setting("QUEUE")
    routed = routes_to(app.conf.task_routes, queue)
    if queue and routed is False and app.conf.task_default_queue != queue:
        messages.append(Warning(
            f"turnkit's maintenance tasks are not routed to the queue {queue!r}.",
            hint=f"Add task_routes = {{'turnkit.*': {{'queue': {queue!r}}}}} and start workers "
                 f"with -Q {queue}.",
            id="turnkit.W002"))
    return messages

