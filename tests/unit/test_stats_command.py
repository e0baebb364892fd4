"""``turnkit_stats``: the metrics' figures for a terminal, from the database (issue 40)."""

from __future__ import annotations

import json
from datetime import timedelta
from decimal import Decimal
from io import StringIO

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from tests.dispatch import override_turnkit
from tests.helpers import crash
from turnkit_django import Agent, reconcile
from turnkit_django.models import Turn
from turnkit_django.testing import FunctionClient, ScriptedClient, reply

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]


def stats(*args: str) -> str:
    out = StringIO()
    call_command("turnkit_stats", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def scene(registered):
    """One completed turn (12 + 5 tokens), one prepared, one recovered, one dead-lettered."""
    client = ScriptedClient([reply("hi", usage={"input_tokens": 12, "output_tokens": 5})])
    done = Agent("stats", client=client).run("hello")
    Turn.objects.filter(pk=done.id).update(cost=Decimal("0.25"))
    waiting = Agent("stats", client=ScriptedClient([])).prepare("later")
    Turn.objects.filter(pk=waiting.id).update(created_at=Turn.objects.get(
        pk=waiting.id).created_at - timedelta(minutes=5))
    agent = registered(Agent("lost", client=FunctionClient(lambda request: reply("ok"))))
    recovered, dead = agent.submit("one"), agent.submit("two")
    crash(dead.id, "before_model_call")
    with override_turnkit(MAX_RECOVERY_ATTEMPTS=0):
        assert reconcile().dead_lettered == [dead.id]
    crash(recovered.id, "before_model_call")
    assert reconcile().recovered == [recovered.id]
    return done, waiting, recovered, dead


def test_the_figures_as_json(scene):
    _done, waiting, _recovered, _dead = scene
    document = json.loads(stats("--json"))
    assert document["live"] == {"pending": 2, "waiting": 0, "paused": 0, "running": 0}
    oldest = document["oldest_pending"]
    assert oldest["turn_id"] == waiting.id and 299 <= oldest["age_seconds"] < 400
    assert document["window_seconds"] == 3600
    assert document["finished"] == {"completed": 1, "failed": 1}
    assert document["recoveries"] == 1 and document["dead_letters"] == 1
    assert document["tokens"] == {"input": 12, "output": 5}
    assert Decimal(document["cost_usd"]) == Decimal("0.25")


def test_the_figures_as_text(scene):
    text = stats()
    assert "live turns: pending 2 · waiting 0 · paused 0 · running 0" in text
    assert "oldest pending: 5 min" in text
    assert "completed 1 · failed 1" in text
    assert "recoveries 1 · dead letters 1" in text
    assert "tokens: input 12 · output 5" in text and "cost $0.25" in text


def test_an_empty_database_prints_zeros():
    document = json.loads(stats("--json"))
    assert document["oldest_pending"] is None and document["recoveries"] == 0
    assert "oldest pending: none" in stats()


def test_a_window_out_of_range_is_refused():
    with pytest.raises(CommandError, match="--window"):
        call_command("turnkit_stats", "--window", "0")
