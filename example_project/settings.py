"""Settings of the example project.

Embedded default, nothing to install: SQLite in IMMEDIATE transaction mode and a Celery broker on
the file system, both under ``example_project/var/``. For production-like runs, set

* ``DATABASE_URL=postgres://user:password@host:5432/name`` for PostgreSQL;
* ``CELERY_BROKER_URL=redis://host:6379/0`` (or any Celery broker URL) for the broker;
* ``TURNKIT_HEARTBEAT_INTERVAL``, ``TURNKIT_LEASE``, ``TURNKIT_RECONCILE_INTERVAL`` (seconds) to
  tune recovery; ``EXAMPLE_VAR_DIR`` to keep the SQLite file and broker folders elsewhere;
* ``EXAMPLE_EVENT_LOG=path`` to append every turnkit event to a JSON-lines file.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import dj_database_url

BASE_DIR = Path(__file__).resolve().parent
VAR_DIR = Path(os.environ.get("EXAMPLE_VAR_DIR") or BASE_DIR / "var").resolve()
VAR_DIR.mkdir(parents=True, exist_ok=True)

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "example-project-insecure-key")
DEBUG = os.environ.get("DJANGO_DEBUG", "1") == "1"
ALLOWED_HOSTS = ["localhost", "127.0.0.1"]
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"
ROOT_URLCONF = "example_project.urls"
STATIC_URL = "static/"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "turnkit_django",
    "example_project.support",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]


# --------------------------------------------------------------------------- database


def _postgres(url: str) -> dict[str, Any]:
    database: dict[str, Any] = dict(dj_database_url.parse(
        url,
        # Workers hold connections for a long time: check them before use (reliability R-Django).
        conn_max_age=60,
        conn_health_checks=True,
    ))
    database["OPTIONS"] = {
        "connect_timeout": 5,
        "keepalives": 1,
        "keepalives_idle": 30,
        "keepalives_interval": 10,
        "keepalives_count": 3,
        # Keepalives probe an idle connection; this bounds one whose sent data is never
        # acknowledged (milliseconds), such as a heartbeat's on a dropped network path.
        "tcp_user_timeout": 30_000,
    }
    return database


def _sqlite(path: Path) -> dict[str, Any]:
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": path,
        "OPTIONS": {
            # Every atomic block takes the write lock at BEGIN, so writers serialize; turnkit
            # requires it on SQLite (system check turnkit.E010).
            "transaction_mode": "IMMEDIATE",
            # Wait for the lock instead of failing while a worker writes.
            "timeout": 20,
            # WAL lets readers (the web process, the demo) read while a worker writes.
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
    }


_database_url = os.environ.get("DATABASE_URL", "")
if _database_url.startswith(("postgres://", "postgresql://")):
    DATABASES = {"default": _postgres(_database_url)}
elif _database_url:
    raise ValueError(f"DATABASE_URL must be a postgres:// URL, got {_database_url!r}")
else:
    DATABASES = {"default": _sqlite(VAR_DIR / "db.sqlite3")}


# Uploads and the images the "studio" agent generates (through Django's storage API).
MEDIA_ROOT = VAR_DIR / "media"
MEDIA_URL = "/media/"


# --------------------------------------------------------------------------- turnkit


def _seconds(name: str, default: float) -> float:
    return float(os.environ.get(name) or default)


TURNKIT = {
    # A scripted stand-in for an LLM, deterministic from the transcript, so it gives the same
    # answers in this process and in every Celery worker. Swap in
    # "turnkit_django.clients.AnthropicClient" (and a real model name) for a real model.
    "CLIENT": "example_project.support.scripted.ScriptedSupportModel",
    "DEFAULT_MODEL": "scripted-support",
    # USD per million tokens, so the demo prints a cost.
    "COST_RATES": {"scripted-support": {"input": "3", "output": "15"}},
    "HEARTBEAT_INTERVAL": _seconds("TURNKIT_HEARTBEAT_INTERVAL", 10),
    "LEASE": _seconds("TURNKIT_LEASE", 60),
    "RECONCILE_INTERVAL": _seconds("TURNKIT_RECONCILE_INTERVAL", 15),
    "TIMEOUT": 300,
    "QUEUE": "turnkit",
}


# --------------------------------------------------------------------------- celery
# The Celery task only rings the doorbell: the database decides who runs a turn, so these
# settings tune latency and noise, never correctness (see docs, "Celery and beat").

CELERY_BROKER_URL = os.environ.get("CELERY_BROKER_URL") or "filesystem://"
_broker_folder = VAR_DIR / "broker"
if CELERY_BROKER_URL.startswith("filesystem://"):
    for _folder in ("queue", "control", "processed"):
        (_broker_folder / _folder).mkdir(parents=True, exist_ok=True)
    CELERY_BROKER_TRANSPORT_OPTIONS: dict[str, Any] = {
        "data_folder_in": str(_broker_folder / "queue"),
        "data_folder_out": str(_broker_folder / "queue"),
        "control_folder": str(_broker_folder / "control"),
        "processed_folder": str(_broker_folder / "processed"),
        "polling_interval": 0.1,
    }
else:
    # Redis (and SQS) redeliver an unacknowledged task after the visibility timeout: keep it
    # far above the longest task (a whole turn, bounded by TIMEOUT) so a slow turn is not run
    # twice. A duplicate would be harmless (the claim decides), only wasteful.
    CELERY_BROKER_TRANSPORT_OPTIONS = {
        "visibility_timeout": int(TURNKIT["TIMEOUT"]) * 4,
        "socket_timeout": 10,
        "socket_connect_timeout": 5,
        "socket_keepalive": True,
        "health_check_interval": 25,
    }

CELERY_TASK_ACKS_LATE = True  # a killed worker's task is delivered again ...
CELERY_TASK_REJECT_ON_WORKER_LOST = True  # ... also when its pool child was killed
CELERY_TASK_ACKS_ON_FAILURE_OR_TIMEOUT = True  # retries belong to the database, not the broker
CELERY_WORKER_PREFETCH_MULTIPLIER = 1  # a worker reserves no turns it cannot start
CELERY_WORKER_CONCURRENCY = int(os.environ.get("CELERY_WORKER_CONCURRENCY") or 2)
CELERY_WORKER_MAX_TASKS_PER_CHILD = 1000  # leak containment
if DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
    # Each worker process keeps its session across tasks (CONN_MAX_AGE above); turnkit's tasks
    # check and recycle it as Django does per request (docs/howto/celery.md, "Database
    # connections"). Without this, Celery's Django fixup opens a new one for every task.
    CELERY_DB_REUSE_MAX = 1000
CELERY_WORKER_CANCEL_LONG_RUNNING_TASKS_ON_CONNECTION_LOSS = True
CELERY_WORKER_SOFT_SHUTDOWN_TIMEOUT = 10.0
CELERY_BROKER_CONNECTION_RETRY_ON_STARTUP = True
CELERY_BROKER_CONNECTION_MAX_RETRIES = None  # retry forever
CELERY_TASK_SERIALIZER = "json"
CELERY_ACCEPT_CONTENT = ["json"]
CELERY_TASK_IGNORE_RESULT = True  # no result backend: the tables are the record
CELERY_RESULT_BACKEND = None
# Below the visibility timeout; a turn's own deadline (TIMEOUT) normally ends it first.
CELERY_TASK_TIME_LIMIT = int(TURNKIT["TIMEOUT"]) * 2
CELERY_TASK_ROUTES = {"turnkit.*": {"queue": TURNKIT["QUEUE"]}}
# turnkit's tasks are found by app.autodiscover_tasks() and its reconcile entry merged in by
# example_project/celery.py (beat_schedule()).
CELERY_BEAT_SCHEDULE: dict[str, Any] = {}
CELERY_BEAT_SCHEDULE_FILENAME = str(VAR_DIR / "celerybeat-schedule")

# Append every turnkit event to this JSON-lines file (example_project/support/eventlog.py).
EXAMPLE_EVENT_LOG = os.environ.get("EXAMPLE_EVENT_LOG") or None

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"turnkit_django": {"handlers": ["console"], "level": "WARNING"}},
}
