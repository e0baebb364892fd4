"""A project's Celery module as Celery's Django guide writes it: nothing but autodiscovery.

No ``include``, no ``imports``: workers know turnkit's tasks only because ``autodiscover_tasks()``
finds ``turnkit_django/tasks.py`` among the installed apps. The broker comes from the Django
settings (``CELERY_BROKER_URL`` in tests/e2e/worker_settings.py).
"""

from __future__ import annotations

import os

from celery import Celery

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.e2e.worker_settings")

app = Celery("autodiscover_project")
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()
