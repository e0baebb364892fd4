"""An operator's session in the admin, in a real headless Chromium against a live server.

Log in, open a finished turn, expand its sub-agent's transcript, follow a tree link; cancel an
active tree with its descendants as a superuser; as staff without ``turnkit.cancel_turn``, find
no cancel button and have the cancel URL refused. Screenshots: build/screenshots/admin-*.png.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from playwright.sync_api import Page, expect

from tests.browser.conftest import Shots, chromium
from tests.browser.scenario import active_tree, finished_run, support
from turnkit_django.models import Turn

pytestmark = [pytest.mark.django_db(transaction=True),
              pytest.mark.usefixtures("console_agents", "background")]


def log_in(page: Page, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/turnkit/turn/")
    page.fill("#id_username", username)
    page.fill("#id_password", "pw")
    page.click("input[type=submit]")
    expect(page.locator("#changelist")).to_be_visible()


def test_an_operator_reads_a_turn_and_cancels_a_tree(live_server, tmp_path: Path,
                                                      shots: Shots) -> None:
    # Data first: no ORM call may run while the browser's event loop is in this thread.
    User.objects.create_superuser("admin", "admin@example.com", "pw")
    viewer = User.objects.create_user("viewer", password="pw", is_staff=True)
    viewer.user_permissions.set(Permission.objects.filter(
        content_type__app_label="turnkit",
        codename__in=["view_turn", "view_conversation", "view_transcript"]))
    done = finished_run()
    writer_id = done.turns().get(agent_name="console_writer").pk
    tree = active_tree()
    tree_ids = set(tree.turns().values_list("pk", flat=True))
    charger_id = tree.turns().get(agent_name="console_charger").pk
    pending = support.prepare("Refund order 43: wrong colour.")
    base = live_server.url

    with chromium(tmp_path) as page:
        log_in(page, base, "admin")
        shots_list = shots.path("admin-turn-list")
        page.screenshot(path=shots_list)

        # Open the finished turn: facts first, then the conversation.
        page.click(f"#result_list a:has-text('{done.id}')")
        expect(page.locator("#tk-facts")).to_contain_text("console_support")
        expect(page.locator("#tk-facts .tk-status-completed")).to_be_visible()
        page.screenshot(path=shots.path("admin-turn-page"), full_page=True)

        # Expand the writer's transcript, nested under the call that started it.
        nested = page.locator(f"details.tk-subagent[data-turn='{writer_id}']")
        expect(nested.get_by_text("A full refund of $19.99")).to_be_hidden()
        nested.locator("summary").click(position={"x": 5, "y": 5})
        expect(nested.get_by_text("A full refund of $19.99")).to_be_visible()
        expect(page.locator(".tk-result-error")).to_contain_text("error")
        expect(page.locator(".tk-result-not_executed")).to_contain_text("not executed")
        page.locator("#tk-transcript").screenshot(path=shots.path("admin-transcript"))

        # Follow the tree to the child turn.
        page.click(f"#tk-tree a.tk-tree-link:text-is('{writer_id}')")
        expect(page).to_have_url(re.compile(f"/admin/turnkit/turn/{writer_id}/change/"))
        expect(page.locator("#tk-facts")).to_contain_text("sub-agent turn at depth 1")
        page.locator("#tk-tree").screenshot(path=shots.path("admin-tree"))

        # Cancel the active tree with its descendants: confirm, then see it done.
        page.goto(f"{base}/admin/turnkit/turn/{tree.id}/change/")
        page.click("a.tk-cancel:text-is('Cancel with descendants')")
        expect(page.locator("#content")).to_contain_text("This cancels 3 turns for good")
        page.screenshot(path=shots.path("admin-cancel-confirmation"))
        page.click("input.tk-confirm")
        expect(page.locator(".messagelist")).to_contain_text("3 turns were cancelled.")
        expect(page.locator("a.tk-cancel")).to_have_count(0)
        page.goto(f"{base}/admin/turnkit/turn/{charger_id}/change/")
        expect(page.locator(".tk-result-outcome_unknown")).to_contain_text("outcome unknown")
        page.screenshot(path=shots.path("admin-outcome-unknown"), full_page=True)

        # Staff without turnkit.cancel_turn: no button, and the URL itself is refused.
        page.context.clear_cookies()
        log_in(page, base, "viewer")
        page.goto(f"{base}/admin/turnkit/turn/{pending.id}/change/")
        expect(page.locator("#tk-facts .tk-status-pending")).to_be_visible()
        expect(page.locator("a.tk-cancel")).to_have_count(0)
        page.screenshot(path=shots.path("admin-without-cancel-permission"))
        refused = page.goto(f"{base}/admin/turnkit/turn/{pending.id}/cancel-with-descendants/")
        assert refused is not None and refused.status == 403
        expect(page.locator("body")).to_contain_text("Forbidden")

    # The browser is closed: the database may be read again.
    assert set(Turn.objects.filter(pk__in=tree_ids).values_list("status", flat=True)) == {
        "cancelled"}
    assert Turn.objects.get(pk=pending.id).status == "pending"
    logged = LogEntry.objects.filter(user__username="admin")
    assert set(logged.values_list("object_id", flat=True)) == tree_ids
    assert not LogEntry.objects.filter(user__username="viewer").exists()
