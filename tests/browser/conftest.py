"""Browser tier: a live server and Debian's Chromium driven by Playwright (sync API).

Playwright's sync API runs an asyncio event loop in the test thread, and Django refuses ORM
calls from a thread with a running loop (SynchronousOnlyOperation). So a browser test builds its
data first, drives the browser inside :func:`chromium` (no ORM calls in that block; the live
server answers from its own thread), and reads the database again after the block has closed
the browser. Nothing here sets DJANGO_ALLOW_ASYNC_UNSAFE.

The tests run on PostgreSQL (scripts/run-tests.sh runs this tier after integration, with
``DJANGO_SETTINGS_MODULE=tests.browser.settings``). Screenshots go to build/screenshots/; with
``TURNKIT_DOCS_SCREENSHOTS=1`` they are copied to docs/img/ as well (the docs show them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import Page, sync_playwright

from tests.browser.scenario import console_agents
from tests.dispatch import background
from tests.helpers import _disarm_failpoints, verify_after_test

__all__ = ["_disarm_failpoints", "background", "console_agents", "verify_after_test"]

ROOT = Path(__file__).resolve().parents[2]
SCREENSHOTS = ROOT / "build" / "screenshots"
DOCS_IMAGES = ROOT / "docs" / "img"
CHROMIUM = os.environ.get("TURNKIT_CHROMIUM", "/usr/bin/chromium")
# As root Chromium needs --no-sandbox; the rest keeps it off the (closed) network.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync"]
VIEWPORT = {"width": 1400, "height": 900}


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip, saying why, where a browser test cannot run (a bare ``pytest`` of every tier).

    ``scripts/run-tests.sh browser`` always provides both, so the tier never skips there.
    """
    reason = ""
    if "django.contrib.staticfiles" not in settings.INSTALLED_APPS:
        reason = ("the browser tier needs DJANGO_SETTINGS_MODULE=tests.browser.settings "
                  "(scripts/run-tests.sh browser sets it)")
    elif not Path(CHROMIUM).exists():
        reason = f"no Chromium at {CHROMIUM}: scripts/run-tests.sh browser installs it"
    if reason:
        here = Path(__file__).parent
        for item in items:
            if here in Path(item.path).parents:
                item.add_marker(pytest.mark.skip(reason=reason))


class Shots:
    """Saves screenshots under build/screenshots/ (and docs/img/ when asked)."""

    def __init__(self) -> None:
        SCREENSHOTS.mkdir(parents=True, exist_ok=True)
        self.saved: list[Path] = []

    def path(self, name: str) -> str:
        path = SCREENSHOTS / f"{name}.png"
        self.saved.append(path)
        return str(path)

    def publish(self) -> None:
        if os.environ.get("TURNKIT_DOCS_SCREENSHOTS") == "1":
            DOCS_IMAGES.mkdir(parents=True, exist_ok=True)
            for path in self.saved:
                shutil.copyfile(path, DOCS_IMAGES / path.name)


@pytest.fixture
def shots() -> Iterator[Shots]:
    saved = Shots()
    yield saved
    saved.publish()


@contextmanager
def chromium(tmp_path: Path) -> Iterator[Page]:
    """A fresh Chromium profile in ``tmp_path``; yields a Playwright page."""
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            str(tmp_path / "chromium-profile"), executable_path=CHROMIUM, headless=True,
            args=FLAGS, viewport=VIEWPORT, locale="en-US", timezone_id="UTC")
        try:
            context.set_default_timeout(15_000)
            yield context.pages[0] if context.pages else context.new_page()
        finally:
            context.close()
