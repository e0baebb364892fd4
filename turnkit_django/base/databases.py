"""turnkit-django keeps its rows in the ``default`` database, and checks that it can
(``turnkit.E022``).

The store writes through the default connection (its one-statement steps are SQL of their own,
sent there), takes its locks there and reads its claims, leases and fences back there: a row
read from a replica that lags can be a claim already taken or a fence already moved, and rows
written to one database and read from another are lost to each other. So a database router
that sends turnkit's models anywhere else, for reads, for writes or for their migrations,
breaks the guarantees; the check says so at ``manage.py check`` (and before ``migrate``,
``runserver`` and every command that runs the system checks) instead of the first turn
finding out. Routers that answer None (or ``"default"``) for the ``turnkit`` app are fine: a
primary/replica router only has to leave this app on the primary.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.apps import apps
from django.core.checks import CheckMessage, Error, Tags, register
from django.db import DEFAULT_DB_ALIAS, connections, router

APP_LABEL = "turnkit"

T = TypeVar("T")


def routing_problems() -> list[str]:
    """What the project's ``DATABASE_ROUTERS`` do with turnkit's models that they must not:
    one line per kind (reads, writes, migrations), naming the models and the database."""
    moved: dict[str, dict[str, list[str]]] = {}
    for model in apps.get_app_config(APP_LABEL).get_models():
        name = model.__name__
        for kind, alias in (("reads", router.db_for_read(model)),
                            ("writes", router.db_for_write(model))):
            if alias != DEFAULT_DB_ALIAS:
                moved.setdefault(kind, {}).setdefault(str(alias), []).append(name)
        if not router.allow_migrate_model(DEFAULT_DB_ALIAS, model):
            moved.setdefault("migrations", {}).setdefault("elsewhere", []).append(name)
    lines = []
    for kind, targets in moved.items():
        for alias, names in targets.items():
            where = ("are not allowed on 'default'" if kind == "migrations"
                     else f"go to database {alias!r}")
            lines.append(f"{kind} of {', '.join(names)} {where}")
    return lines


@register(Tags.compatibility, APP_LABEL)
def check_routing(app_configs: Sequence[Any] | None = None, **kwargs: Any) -> list[CheckMessage]:
    """E022: turnkit's models routed off the default database."""
    problems = routing_problems()
    if not problems:
        return []
    return [Error(
        "DATABASE_ROUTERS move turnkit's models off the 'default' database: "
        + "; ".join(problems) + ".",
        hint="turnkit-django keeps its rows, locks and leases in the 'default' database. Make "
             "each router answer None (or 'default') for app_label 'turnkit' in db_for_read, "
             "db_for_write and allow_migrate, as a primary/replica router does for apps that "
             "must read their own writes.",
        id="turnkit.E022")]


def unit(work: Callable[..., T], *args: Any) -> T:
    """``work(*args)``, then close this thread's database connections that are not in a
    transaction: code that waits between short reads (an event stream, ``run.wait()``) holds no
    session while it sleeps (one per waiter would exhaust ``max_connections``). A connection in
    a transaction is left alone; with a pool, closing returns it. Unlike
    ``close_old_connections()``, which closes only what is past ``CONN_MAX_AGE`` or broken,
    this closes them all, inside a request too."""
    try:
        return work(*args)
    finally:
        for connection in connections.all(initialized_only=True):
            if not connection.in_atomic_block:
                connection.close()


__all__ = ["APP_LABEL", "check_routing", "routing_problems", "unit"]
