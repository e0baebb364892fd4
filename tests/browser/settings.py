"""Settings of the browser tier: the test settings plus what a live admin needs.

Static files (the live server serves the admin's and turnkit's CSS), the CSRF middleware (the
browser posts real forms), the recording dispatcher (background turns run only when a test runs
them) and cost rates (so pages show dollars). scripts/run-tests.sh selects this module for
tests/browser; by hand: ``DJANGO_SETTINGS_MODULE=tests.browser.settings pytest tests/browser``.
"""

from __future__ import annotations

from tests.browser.scenario_rates import RATES
from tests.dispatch import DISPATCHER
from tests.settings import *  # noqa: F403
from tests.settings import INSTALLED_APPS, MIDDLEWARE, TURNKIT

INSTALLED_APPS = [*INSTALLED_APPS, "django.contrib.staticfiles"]
STATIC_URL = "/static/"
MIDDLEWARE = [*MIDDLEWARE[:1], "django.middleware.csrf.CsrfViewMiddleware", *MIDDLEWARE[1:]]
ALLOWED_HOSTS = ["localhost", "127.0.0.1", "testserver"]
TURNKIT = {**TURNKIT, "DISPATCHER": DISPATCHER, "COST_RATES": RATES}
