"""The example project's Celery app: ``celery -A example_project worker -Q turnkit``.

Settings come from ``settings.py`` (the ``CELERY_`` names). ``autodiscover_tasks()`` finds
turnkit's tasks (``turnkit_django/tasks.py``) among the installed apps; turnkit's beat entries
are merged into the schedule here (they read the ``TURNKIT`` setting only when beat runs).
"""

from __future__ import annotations

import os

from celery import Celery

from turnkit_django.celery import beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
app.conf.beat_schedule = {**(app.conf.beat_schedule or {}), **beat_schedule()}
