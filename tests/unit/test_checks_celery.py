"""Deploy checks for the project's Celery app: beat must reconcile, tasks must reach our queue."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from celery import Celery
from django.core.checks import run_checks

from turnkit_django.celery import beat_schedule


@pytest.fixture
def project_app() -> Iterator[Celery]:
    app = Celery("project", set_as_current=True)
    yield app
    Celery("default", set_as_current=True)


def deploy_ids() -> set[str]:
    return {m.id for m in run_checks(include_deployment_checks=True)}


def test_missing_beat_entry_and_route_are_warnings(project_app):
    ids = deploy_ids()
    assert {"turnkit.W001", "turnkit.W002"} <= ids


def test_recommended_configuration_passes(project_app):
    project_app.conf.beat_schedule = beat_schedule()
    project_app.conf.task_routes = {"turnkit.*": {"queue": "turnkit"}}
    assert not {"turnkit.W001", "turnkit.W002"} & deploy_ids()
