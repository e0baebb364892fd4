"""The example project's Celery app: ``celery -A example_project worker -Q turnkit``.

Settings come from ``settings.py`` (the ``CELERY_`` names); turnkit's reconcile entry is merged
into the beat schedule here because it reads the ``TURNKIT`` setting.
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")


def _merge_turnkit_beat() -> None:
    from turnkit_django.celery import beat_schedule

    app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **beat_schedule()}


_merge_turnkit_beat()
