"""The turn page shows an image message's thumbnail and an analysis's findings, in Chromium.

The image is the one ``FunctionMediaClient`` paints (a 1x1 PNG), stored in the default storage
under the test's MEDIA_ROOT and served at MEDIA_URL (tests/urls.py), as a project's web server
would. Screenshot: build/screenshots/admin-media.png.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from playwright.sync_api import expect

from tests.browser.conftest import Shots, chromium
from tests.browser.test_console import log_in
from tests.helpers import media_root, registered
from turnkit_django import Agent, tool
from turnkit_django.testing import PNG, FunctionClient, FunctionMediaClient, call, reply

__all__ = ["media_root", "registered"]

pytestmark = [pytest.mark.django_db(transaction=True)]


def test_an_operator_sees_the_thumbnail_and_the_analysis(live_server, tmp_path: Path,
                                                         shots: Shots, registered: Any,
                                                         media_root: Path) -> None:
    images = FunctionMediaClient()

    @tool
    def inspect_and_draw(ctx: Any) -> str:
        """Look at the customer's photo, then draw a replacement."""
        ctx.turn.view_media((PNG, "image/png"), objective="Is the spout chipped?",
                            client=images)
        ctx.turn.paint("A blue teapot on a shelf", client=images, model="gpt-image-1")
        return "done"

    agent = registered(Agent("console_painter", tools=[inspect_and_draw],
                             client=FunctionClient(lambda r: call("inspect_and_draw")
                                                   if r.last_message_is_user()
                                                   else reply("Here is your new teapot."))))
    run = agent.run("My teapot broke")
    assert run.status == "completed", run.error
    User.objects.create_superuser("admin", "admin@example.com", "pw")

    with chromium(tmp_path) as page:
        log_in(page, live_server.url, "admin")
        page.goto(f"{live_server.url}/admin/turnkit/turn/{run.id}/change/")
        thumbnail = page.locator(".tk-image img")
        expect(thumbnail).to_be_visible()
        expect(thumbnail).to_have_attribute("alt", "A blue teapot on a shelf")
        # The browser fetched and decoded the stored PNG (1x1, shown 160 px wide).
        assert page.evaluate("document.querySelector('.tk-image img').naturalWidth") == 1
        assert thumbnail.bounding_box()["width"] == 160
        analysis = page.locator(".tk-analysis")
        expect(analysis).to_contain_text("Is the spout chipped?")
        expect(analysis.locator(".tk-media")).to_contain_text("image/png")
        page.locator("#tk-transcript").screenshot(path=shots.path("admin-media"))
