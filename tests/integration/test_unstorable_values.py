"""PostgreSQL refuses NUL, lone surrogates and NaN; model and tool output holding them is
stored cleaned (as on SQLite: tests/unit/test_bad_input.py), and application input holding
them is refused before any write."""

from __future__ import annotations

import pytest
from asgiref.sync import async_to_sync
from django.conf import settings
from django.contrib.auth import get_user_model
from django.test import AsyncClient, Client

from tests.unstorable import CASES, TOO_LONG, run_case
from turnkit_django import (
    Agent,
    ConfigurationError,
    InputError,
    NotFound,
    load_conversation,
    load_run,
    load_turn,
)
from turnkit_django.models import Conversation, Message, Turn
from turnkit_django.testing import ScriptedClient, reply

pytestmark = [
    pytest.mark.django_db(transaction=True),  # real commits: the one-statement steps too
    pytest.mark.skipif("postgresql" not in settings.DATABASES["default"]["ENGINE"],
                       reason="needs TURNKIT_TEST_DATABASE_URL (PostgreSQL)"),
]


@pytest.mark.parametrize("name", CASES)
def test_model_and_tool_output_is_stored_cleaned_and_the_run_completes(name):
    run_case(CASES[name])


@pytest.mark.usefixtures("background")
@pytest.mark.parametrize("name", TOO_LONG)
def test_an_over_long_name_or_id_completes_a_background_turn(name, registered):
    """varchar(200) refused them with DataError: the turn stayed running, was asked again after
    each lease expiry and was dead-lettered. Now it completes, as on SQLite."""
    run_case(CASES[name], registered)


@pytest.mark.parametrize("text", ["a\x00b", "a\ud800b"])
def test_application_text_that_cannot_be_stored_is_refused_before_any_write(text):
    agent = Agent("strict", client=ScriptedClient([reply("ok")]))
    conversation = agent.conversation()
    for attempt in (lambda: agent.run(text), lambda: agent.prepare(text),
                    lambda: conversation.say(text), lambda: conversation.ask(text),
                    lambda: conversation.post(text, key="k")):
        with pytest.raises(InputError):
            attempt()
    assert not Turn.objects.exists() and not Message.objects.exists()


@pytest.mark.parametrize("value", [float("nan"), float("inf"), "a\x00b", {"k\x00": 1}])
def test_context_and_metadata_that_cannot_be_stored_are_refused(value):
    agent = Agent("strict", client=ScriptedClient([reply("ok")]))
    with pytest.raises(ConfigurationError):
        agent.prepare("x", context={"s": value})
    with pytest.raises(ConfigurationError):
        agent.conversation(metadata={"s": value})
    assert not Conversation.objects.exists()


@pytest.mark.parametrize("ident", ["turn_\x00", "conv_a\x00b", "turn_\ud800"])
def test_an_id_that_cannot_be_stored_names_nothing(ident):
    """PostgreSQL refused the query itself (DataError, a 500 in a view): such an id names no
    row, so the loaders raise NotFound, as the views docs say, and as on SQLite."""
    for load in (load_run, load_turn, load_conversation):
        with pytest.raises(NotFound):
            load(ident)


@pytest.mark.parametrize("path", ["turn_%00/events", "turn_%00/", "a%00b/events"])
def test_the_views_answer_an_id_holding_a_nul_with_404(path):
    user = get_user_model().objects.create_user("reader", password="x")
    client, streaming = Client(), AsyncClient()
    client.force_login(user)
    streaming.force_login(user)
    get = async_to_sync(streaming.get) if path.endswith("events") else client.get
    assert get(f"/turnkit/runs/{path}").status_code == 404
