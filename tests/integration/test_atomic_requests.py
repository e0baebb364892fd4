"""Inline execution inside an atomic block is refused (issue 10, item 4).

Inside ``transaction.atomic()`` (what ``ATOMIC_REQUESTS`` wraps every view in) each step of a
turn would be a savepoint: a view that raises afterwards rolls back the turn and the record
that a refund ran, and meanwhile the turn is invisible to other connections and its locks are
held across model and tool calls. So ``agent.run()``, ``turn.execute()`` and ``conv.ask()``
refuse to run there, before writing anything; ``submit()`` is fine (it dispatches on commit).
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import connection, transaction
from django.test import Client

from tests.dispatch import recorded
from turnkit_django import Agent, AtomicBlockError
from turnkit_django.models import Conversation, Turn
from turnkit_django.testing import ScriptedClient, reply

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.usefixtures("background")]


def agent() -> Agent:
    return Agent("atomic", client=ScriptedClient([reply("done")] * 3))


@pytest.fixture
def atomic_requests() -> Iterator[None]:
    connection.settings_dict["ATOMIC_REQUESTS"] = True
    yield
    connection.settings_dict["ATOMIC_REQUESTS"] = False


@pytest.mark.parametrize("start", [
    lambda a: a.run("go"),
    lambda a: a.conversation().ask("go"),
])
def test_inline_execution_inside_an_atomic_block_is_refused_and_writes_nothing(start):
    with pytest.raises(AtomicBlockError) as raised, transaction.atomic():
        start(agent())
    assert "transaction.atomic" in str(raised.value) and "submit()" in str(raised.value)
    assert not Turn.objects.exists() and not Conversation.objects.exists()


def test_executing_a_prepared_turn_inside_an_atomic_block_is_refused():
    run = agent().prepare("go")
    with pytest.raises(AtomicBlockError), transaction.atomic():
        run.execute()
    assert run.refresh().status == "pending"
    assert run.execute().status == "completed"  # outside the block it runs


def test_submit_inside_an_atomic_block_dispatches_after_the_commit():
    with transaction.atomic():
        run = agent().submit("go")
        assert run.id not in recorded()
    assert run.id in recorded()


def test_a_view_under_atomic_requests_gets_the_refusal(atomic_requests):
    with pytest.raises(AtomicBlockError):
        Client().get("/agents/inline/")
    assert not Turn.objects.exists()


def test_a_non_atomic_view_and_a_submitting_view_work_under_atomic_requests(atomic_requests):
    response = Client().get("/agents/inline-non-atomic/")
    assert response.json() == {"status": "completed", "output": "answered in a view"}
    response = Client().get("/agents/submit/")
    assert response.json()["status"] == "pending"
    assert response.json()["id"] in recorded()
