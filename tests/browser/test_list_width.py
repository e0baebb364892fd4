"""The admin's list pages at the browser tier's width (1400 px): every column can be reached.

The lists kept each value on one line, so a list with ids, related objects and dates was wider
than its box and scrolled sideways inside it: the last columns were cut off at the filter panel,
out of view until one found the scroll bar under the table. The cells holding ids now wrap (a
long id breaking where it must), so the whole table fits its box at this width.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from django.contrib.auth.models import User

from tests.browser.conftest import VIEWPORT, Shots, chromium
from tests.browser.scenario import finished_run, support
from turnkit_django import services

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("console_agents", "background")]

LISTS = ("turn", "toolexecution", "conversation")


def test_the_last_column_of_every_list_is_in_view_at_1400_px(live_server, tmp_path: Path,
                                                            shots: Shots) -> None:
    User.objects.create_superuser("admin", "admin@example.com", "pw")
    finished_run()
    services.cancel(support.prepare("Refund order 43: wrong colour.").id)
    base = live_server.url

    with chromium(tmp_path) as page:
        page.goto(f"{base}/admin/login/?next=/admin/")
        page.fill("#id_username", "admin")
        page.fill("#id_password", "pw")
        page.click("input[type=submit]")
        for name in LISTS:
            page.goto(f"{base}/admin/turnkit/{name}/")
            page.screenshot(path=shots.path(f"admin-{name}-list-1400"))
            # The page itself is no wider than the window: nothing is cut off at its edge.
            width = page.evaluate("document.documentElement.scrollWidth")
            assert width <= VIEWPORT["width"], (name, width)
            # Nor is the list wider than its box (which would scroll, its last columns hidden
            # until one finds the scroll bar under the table): the last column is in view.
            box = page.evaluate("""() => { const r = document.querySelector(
                "#changelist-form .results"); return [r.scrollWidth, r.clientWidth]; }""")
            assert box[0] <= box[1], (name, box)
            last = page.locator("#result_list thead th").last
            cell = last.bounding_box()
            assert cell is not None and cell["x"] + cell["width"] <= VIEWPORT["width"], name
            visible = page.evaluate("""(th) => {
                const r = th.getBoundingClientRect();
                const hit = document.elementFromPoint(r.right - 2, r.top + r.height / 2);
                return hit !== null && th.contains(hit);
            }""", last.element_handle())
            assert visible, name
