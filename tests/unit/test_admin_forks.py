"""Forks and retries in the operations console (issue 39): a fork's conversation page says what
it was forked from and at which message, the original's page lists its forks (at most
``LINKED_LIMIT``, with their count); a retry's turn page says what it retries, the original's
lists its retries. The lists cost the same queries however many forks or retries there are."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from turnkit_django import Agent, ModelError
from turnkit_django.console.admin_views import LINKED_LIMIT
from turnkit_django.models import Conversation
from turnkit_django.testing import FunctionClient, ScriptedClient, reply

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def staff_client(client: Client) -> Client:
    client.force_login(User.objects.create_superuser("admin", "admin@example.com", "pw"))
    return client


def page(client: Client, name: str, pk: str) -> str:
    response = client.get(reverse(f"admin:turnkit_{name}_change", args=[pk]))
    assert response.status_code == 200, response
    return response.content.decode()


def link(name: str, pk: str) -> str:
    return f'href="{reverse(f"admin:turnkit_{name}_change", args=[pk])}"'


def facts(body: str) -> str:
    return body[body.index('id="tk-facts"'):body.index("</section>", body.index('id="tk-facts"'))]


@pytest.fixture
def echo(registered) -> Agent:
    return registered(Agent("admin_fork_echo", client=FunctionClient(lambda r: reply("ok"))))


def test_a_forks_page_links_its_original_and_the_original_lists_its_forks(staff_client, echo):
    conv = echo.conversation()
    conv.ask("first")
    conv.ask("second")
    fork = conv.fork(at=2)

    mine = facts(page(staff_client, "conversation", fork.id))
    assert "forked from" in mine and link("conversation", conv.id) in mine
    assert "at message 2" in mine

    original = facts(page(staff_client, "conversation", conv.id))
    assert "forked from" not in original
    assert link("conversation", fork.id) in original and "1 fork" in original


def test_a_conversation_lists_at_most_the_limit_of_its_forks_with_their_count(staff_client,
                                                                             echo):
    conv = echo.conversation()
    conv.ask("first")
    forks = [conv.fork(at=2) for _ in range(LINKED_LIMIT + 3)]

    original = facts(page(staff_client, "conversation", conv.id))
    shown = [f for f in forks if link("conversation", f.id) in original]
    assert len(shown) == LINKED_LIMIT
    assert f"{LINKED_LIMIT + 3} forks" in original and "3 more" in original


@pytest.fixture
def flaky(registered) -> Agent:
    return registered(Agent("admin_retry_flaky", client=ScriptedClient(
        [ModelError("provider down"), ModelError("still down"), reply("Refunded.")])))


def test_a_retrys_page_links_the_original_and_the_original_lists_its_retries(staff_client,
                                                                            flaky):
    run = flaky.run("Refund order 42")
    first = run.retry()
    second = run.retry()
    assert (first.status, second.status) == ("failed", "completed")

    mine = facts(page(staff_client, "turn", second.id))
    assert "retry of" in mine and link("turn", run.id) in mine

    original = facts(page(staff_client, "turn", run.id))
    assert "retry of" not in original
    assert link("turn", first.id) in original and link("turn", second.id) in original
    assert "2 retries" in original and "tk-status-completed" in original


def queries_for(client: Client, url: str) -> int:
    with CaptureQueriesContext(connection) as captured:
        assert client.get(url).status_code == 200
    return len(captured)


def test_forks_and_retries_cost_the_same_queries_however_many_there_are(staff_client, echo,
                                                                         registered):
    few, many = echo.conversation(), echo.conversation()
    for conv, count in ((few, 1), (many, LINKED_LIMIT + 5)):
        conv.ask("first")
        for _ in range(count):
            conv.fork(at=2)
    url = reverse("admin:turnkit_conversation_change", args=[few.id])
    queries_for(staff_client, url)  # warm the per-process caches (content types ...)
    assert queries_for(staff_client, reverse(
        "admin:turnkit_conversation_change", args=[many.id])) == queries_for(staff_client, url)

    failing = registered(Agent("admin_retry_always", client=FunctionClient(
        lambda r: (_ for _ in ()).throw(ModelError("down")))))
    runs = [failing.run("a"), failing.run("b")]
    for run, count in zip(runs, (1, LINKED_LIMIT + 5), strict=True):
        for _ in range(count):
            assert run.retry().status == "failed"
    pages = [reverse("admin:turnkit_turn_change", args=[r.id]) for r in runs]
    queries_for(staff_client, pages[0])
    assert queries_for(staff_client, pages[1]) == queries_for(staff_client, pages[0])
    assert Conversation.objects.filter(forked_from_id=runs[1].row.conversation_id).count() == (
        LINKED_LIMIT + 5)
