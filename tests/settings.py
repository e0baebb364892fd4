"""Django settings for the test suite.

The database comes from ``TURNKIT_TEST_DATABASE_URL`` (a ``postgres://`` URL, set by the test
command once it has started its throwaway server); without it the suite runs on SQLite in memory
in IMMEDIATE transaction mode, which is what the unit tier uses.
"""

from __future__ import annotations

import os
from typing import Any

import dj_database_url

SECRET_KEY = "turnkit-tests-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "turnkit_django",
    "tests.testapp",
]

MIDDLEWARE = [
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"

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


def _database_from_url(url: str) -> dict[str, Any]:
    database: dict[str, Any] = dict(dj_database_url.parse(url))
    database["TEST"] = {"NAME": f"{database['NAME']}_test"}
    if database["ENGINE"] == "django.db.backends.postgresql":
        # What docs/howto/deployment.md recommends: turnkit's step statements are prepared.
        database["OPTIONS"] = {"prepare_threshold": 5}
    return database


_url = os.environ.get("TURNKIT_TEST_DATABASE_URL")
if _url:
    DATABASES = {"default": _database_from_url(_url)}
else:
    DATABASES = {
        "default": {
            "ENGINE": "django.db.backends.sqlite3",
            "NAME": ":memory:",
            "OPTIONS": {"transaction_mode": "IMMEDIATE"},
        }
    }

TURNKIT = {
    "DEFAULT_MODEL": "scripted",
    "CLIENT": "turnkit_django.testing.ScriptedClient",
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"null": {"class": "logging.NullHandler"}},
    "root": {"handlers": ["null"], "level": "WARNING"},
}
