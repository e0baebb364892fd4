"""The example project's Celery app: ``celery -A example_project worker -Q turnkit``.

Settings come from ``settings.py`` (the ``CELERY_`` names). ``autodiscover_tasks()`` finds
turnkit's tasks (``turnkit_django/tasks.py``) among the installed apps; turnkit's beat entries
are merged into the schedule when Celery loads its configuration, so importing this module reads
no setting (the entries read ``TURNKIT`` only when beat runs).
"""

from __future__ import annotations

import os
from typing import Any

from celery import Celery

from turnkit_django.celery import beat_schedule

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "example_project.settings")

app = Celery("example_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@app.on_after_configure.connect
def add_turnkit_schedule(sender: Celery, **kwargs: Any) -> None:
    """Merge turnkit's entries once Celery loads the configuration: nothing is read at import."""
    sender.conf.beat_schedule = {**(sender.conf.beat_schedule or {}), **beat_schedule()}
