"""turnkit-django runs on the default database: a router that sends its models elsewhere (a
read replica for every app, a database of their own) is an error at ``manage.py check``."""

from __future__ import annotations

from typing import Any

import pytest
from django.core.checks import run_checks
from django.test import override_settings

from turnkit_django.checks import TAG


class ReplicaReads:
    """The usual primary/replica router: every read from the replica."""

    def db_for_read(self, model: Any, **hints: Any) -> str:
        return "replica"


class OwnDatabase:
    """A router that puts the turnkit app in a database of its own."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "agents" if model._meta.app_label == "turnkit" else None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "agents" if model._meta.app_label == "turnkit" else None

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == "turnkit":
            return db == "agents"
        return None


class SparesTurnkit(ReplicaReads):
    """A replica router that leaves turnkit's models on the primary, as the docs show."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return None if model._meta.app_label == "turnkit" else "replica"


def routing_errors(*routers: str) -> list[str]:
    with override_settings(DATABASE_ROUTERS=list(routers)):
        return [m.msg + " " + (m.hint or "") for m in run_checks(tags=[TAG])
                if m.id == "turnkit.E022"]


HERE = __name__


def test_no_router_is_fine():
    assert routing_errors() == []


def test_a_router_that_leaves_turnkit_on_the_default_database_is_fine():
    assert routing_errors(f"{HERE}.SparesTurnkit") == []


@pytest.mark.parametrize(("router", "says"), [
    ("ReplicaReads", "reads"),
    ("OwnDatabase", "writes"),
    ("OwnDatabase", "migrat"),
])
def test_a_router_that_moves_turnkit_models_off_the_default_database_is_an_error(router, says):
    errors = routing_errors(f"{HERE}.{router}")
    assert len(errors) == 1, errors
    assert says in errors[0]
    assert "DATABASE_ROUTERS" in errors[0] and "'default'" in errors[0]
    assert "turnkit" in errors[0]
