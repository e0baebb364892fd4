"""The example project: a support agent with tools, a sub-agent and a Celery worker setup.

Importing the Celery app here makes ``shared_task`` (turnkit's tasks) bind to it in every process
that loads Django with these settings: web, shell, worker and beat.
"""

from .celery import app as celery_app

__all__ = ["celery_app"]
