"""The live run page shows a background turn's text as the model writes it (issue 38): the
``message.delta`` frames of the SSE view append to a per-turn partial line through
``textContent`` (model text that looks like HTML is shown as text), and the step's committed
``message.created`` replaces that line. Screenshot: docs/img/streaming-run-page.png (with
``TURNKIT_DOCS_SCREENSHOTS=1``)."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from playwright.sync_api import expect

from tests.asgi_server import serving
from tests.browser.conftest import Shots, chromium
from tests.helpers import registered
from turnkit_django import Agent, Delta, load_run, services
from turnkit_django.runtime import streaming as runtime_streaming
from turnkit_django.testing import FunctionClient, reply

__all__ = ["registered"]

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]

ANSWER = "Here is <b>html</b> written slowly, word by word, as a model streams it."


def run_turn(run_id: str, errors: list[BaseException]) -> None:
    try:
        services.run_turn(run_id)
    except BaseException as exc:  # reported by the test
        errors.append(exc)
    finally:
        connection.close()


def test_the_run_page_shows_partial_text_before_the_step_commits_and_html_as_text(
        registered, tmp_path: Path, shots: Shots) -> None:
    agent = registered(Agent("streamed-page", client=FunctionClient(
        lambda request: reply(ANSWER, chunks=8, delay=0.4))))
    user = User.objects.create_user("reader", password="pw")
    client = Client()
    client.force_login(user)
    session = client.cookies["sessionid"].value
    run = agent.submit("Write slowly", principal={"user": user.pk})
    errors: list[BaseException] = []
    with serving() as base, chromium(tmp_path) as page:
        page.context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
        page.goto(f"{base}/turnkit/runs/{run.id}/")
        # The user's message came from the first poll: the view subscribed before it.
        expect(page.locator("#transcript")).to_contain_text("Write slowly")
        worker = threading.Thread(target=run_turn, args=(run.id, errors))
        worker.start()
        partial = page.locator("#transcript li.partial")
        expect(partial).to_contain_text("<b>html</b>", timeout=10_000)
        # The step has not committed: no assistant message yet, and the text goes on.
        expect(page.locator("#transcript li:not(.partial)", has_text="assistant:")
               ).to_have_count(0)
        assert ANSWER not in partial.text_content()
        expect(partial.locator("b")).to_have_count(0)
        page.screenshot(path=shots.path("streaming-run-page"), full_page=True)

        expect(page.locator("#status")).to_have_text("completed", timeout=30_000)
        expect(partial).to_have_count(0)
        committed = page.locator("#transcript li", has_text="assistant:")
        expect(committed).to_have_count(1)
        expect(committed).to_contain_text(ANSWER)
        expect(page.locator("#transcript b")).to_have_count(0)
        worker.join(timeout=30)
    assert errors == []
    assert load_run(run.id).output_text == ANSWER


def test_the_run_page_drops_text_of_an_older_fence(registered, tmp_path: Path) -> None:
    """A turn recovered after a crash streams its step again under a new fence: the page
    restarts the partial line and ignores late deltas of the older fence."""
    agent = registered(Agent("fenced-page", client=FunctionClient(lambda request: reply("x"))))
    user = User.objects.create_user("reader", password="pw")
    client = Client()
    client.force_login(user)
    session = client.cookies["sessionid"].value
    run = agent.submit("Hello", principal={"user": user.pk})
    with serving() as base, chromium(tmp_path) as page:
        page.context.add_cookies([{"name": "sessionid", "value": session, "url": base}])
        page.goto(f"{base}/turnkit/runs/{run.id}/")
        expect(page.locator("#transcript")).to_contain_text("Hello")
        channel = runtime_streaming.delta_channel()  # the view in this process subscribed
        for index, (fence, text) in enumerate([(1, "old "), (2, "new "), (1, "late"),
                                               (2, "text")]):
            channel.publish(run.id, Delta(run.id, fence, index, "text", text))
        expect(page.locator("#transcript li.partial")).to_have_text("assistant: new text")
