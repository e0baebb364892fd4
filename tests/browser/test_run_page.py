"""The live run page (issue 15) in headless Chromium, served by a real ASGI server.

A background run parks a refund for approval; the page shows the call as a pending approval
and the transcript so far. A person approves it (in another thread: no ORM call runs in the
browser's thread), a worker finishes the run, and the page, still open, shows the approval gone,
the run completed and the model's answer; after a reload it shows the same transcript again.
Screenshot: build/screenshots/run-page.png.
"""

from __future__ import annotations

import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from playwright.sync_api import Page, expect

from tests.asgi_server import serving
from tests.browser.conftest import Shots, chromium
from tests.helpers import registered
from tests.integration.test_controls import issue_refund, refund_then_report
from turnkit_django import Agent, load_run, services
from turnkit_django.models import ToolExecution
from turnkit_django.testing import Call, FunctionClient

__all__ = ["registered"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


@contextmanager
def paused_run_page(registered, tmp_path: Path, call_id: str | None = None
                    ) -> Iterator[tuple[Page, str, str]]:
    """A background run parked on a refund's approval, open in the page of the user it was
    started for (the page shows it to them): the page, the run's id and the call's id (the
    model's ``call_id`` when given)."""
    respond = refund_then_report("issue_refund")

    def with_id(request):
        response = respond(request)
        if call_id is None or not isinstance(response, Call):
            return response
        return replace(response, id=call_id)

    agent = registered(Agent("paged", tools=[issue_refund], client=FunctionClient(with_id)))
    user = User.objects.create_user("reader", password="pw")
    client = Client()
    client.force_login(user)
    session = client.cookies["sessionid"].value
    run = agent.submit("refund order 42", principal={"user": user.pk})
    assert services.run_turn(run.id)
    call_id = ToolExecution.objects.awaiting_approval().get(turn_id=run.id).tool_call_id
    with serving() as base, chromium(tmp_path) as page:
        page.context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
        page.goto(f"{base}/turnkit/runs/{run.id}/")
        expect(page.locator(f"#approval-{call_id}")).to_contain_text("issue_refund")
        yield page, run.id, call_id


def approve_and_finish(run_id: str, call_id: str, errors: list[BaseException]) -> None:
    try:
        load_run(run_id).approve(call_id)
        services.run_turn(run_id)
    except BaseException as exc:  # reported by the test
        errors.append(exc)
    finally:
        connection.close()  # this thread's session, or it outlives the test database


def test_the_run_page_shows_a_pending_approval_and_the_live_transcript(
        registered, tmp_path: Path, shots: Shots) -> None:
    errors: list[BaseException] = []
    with paused_run_page(registered, tmp_path) as (page, run_id, call_id):
        expect(page.locator("#transcript")).to_contain_text("refund order 42")
        expect(page.locator("#status")).to_have_text("paused")
        page.screenshot(path=shots.path("run-page"), full_page=True)

        worker = threading.Thread(target=approve_and_finish, args=(run_id, call_id, errors))
        worker.start()
        expect(page.locator("#status")).to_have_text("completed", timeout=30_000)
        expect(page.locator("#transcript")).to_contain_text("refunded 500")
        expect(page.locator(f"#approval-{call_id}")).to_have_count(0)
        expect(page.locator("#no-approvals")).to_be_visible()
        worker.join(timeout=30)

        page.reload()
        expect(page.locator("#transcript")).to_contain_text("refunded 500")
        expect(page.locator("#status")).to_have_attribute("data-ended", "1")
    assert errors == []
    assert load_run(run_id).status == "completed"


def cancel(run_id: str, errors: list[BaseException]) -> None:
    try:
        load_run(run_id).cancel(cascade=True)
    except BaseException as exc:  # reported by the test
        errors.append(exc)
    finally:
        connection.close()


def test_the_run_page_drops_an_approval_its_cancelled_turn_will_never_ask_again(
        registered, tmp_path: Path) -> None:
    """The page removed a pending approval on approval.approved/denied/expired only: after a
    cancel (approval.cancelled) it still showed the call as pending."""
    errors: list[BaseException] = []
    with paused_run_page(registered, tmp_path) as (page, run_id, call_id):
        canceller = threading.Thread(target=cancel, args=(run_id, errors))
        canceller.start()
        expect(page.locator("#status")).to_have_text("cancelled", timeout=30_000)
        expect(page.locator(f"#approval-{call_id}")).to_have_count(0)
        expect(page.locator("#no-approvals")).to_be_visible()
        canceller.join(timeout=30)
    assert errors == []


def test_the_run_page_keeps_an_approval_whatever_the_model_called_it(
        registered, tmp_path: Path) -> None:
    """The page kept pending approvals in a plain object keyed by the model's call id: a call
    named ``__proto__`` set the object's prototype instead, so the page said "None." while the
    call waited."""
    errors: list[BaseException] = []
    with paused_run_page(registered, tmp_path, call_id="__proto__") as (page, run_id, call_id):
        expect(page.locator("#no-approvals")).to_be_hidden()
        worker = threading.Thread(target=approve_and_finish, args=(run_id, call_id, errors))
        worker.start()
        expect(page.locator("#status")).to_have_text("completed", timeout=30_000)
        expect(page.locator("#approval-__proto__")).to_have_count(0)
        expect(page.locator("#no-approvals")).to_be_visible()
        worker.join(timeout=30)
    assert errors == []
