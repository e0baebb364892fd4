"""What one poll of the SSE view costs (issue 35): a poll that finds nothing new is one bounded
query, whatever the size of the tree, and the events of conversations the reader may not read
move the cursor instead of making every later poll read them (and the tree) again."""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from django.db import connection
from django.test import RequestFactory
from django.test.utils import CaptureQueriesContext

from tests.dispatch import clear
from turnkit_django import Agent, services
from turnkit_django.console.views import END, WAITING, Cursor, EventStream
from turnkit_django.models import Event, Turn
from turnkit_django.testing import FunctionClient, call, reply
from turnkit_django.tools import send_message

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("background")]

DESK = {"tenant": "helpdesk", "user": 99}


def fan_out(registered, desks: int):
    """A customer run whose one step messages ``desks`` helpdesk conversations (each of another
    principal): after it, the root is completed and ``desks`` continuations of its tree are
    pending in conversations its user may not read."""
    user = get_user_model().objects.create_user(f"sender{desks}", password="x")
    desk = registered(Agent("desk", client=FunctionClient(lambda r: reply("SECRET notes"))))
    targets = [desk.conversation(principal=DESK).id for _ in range(desks)]

    def customer(request):
        if request.last_message_is_tool_result():
            return reply("escalated")
        return [call("send_message", conversation_id=target, text="help") for target in targets]

    cust = registered(Agent("cust", tools=[send_message], client=FunctionClient(customer)))
    run = cust.prepare("help", principal={"user": user.pk})
    clear()
    services.run_turn(run.id)
    clear()
    assert Turn.objects.filter(root_turn_id=run.id).active().count() == desks
    return user, run


def open_cursor(view: EventStream, user, run_id: str, after: int = 0) -> Cursor:
    request = RequestFactory().get(f"/turnkit/runs/{run_id}/events", {"after": after})
    request.user = user
    cursor = view._open(request, run_id)
    assert cursor is not None
    return cursor


def poll(view: EventStream, cursor: Cursor) -> tuple[list[str], bool, int]:
    with CaptureQueriesContext(connection) as queries:
        frames, done = view.poll(cursor)
    return frames, done, len(queries.captured_queries)


def ids(frames: list[str]) -> list[str]:
    return [f.split("\n")[0] for f in frames if f.startswith("id: ")]


@pytest.mark.parametrize("desks", [1, 6])
def test_an_idle_poll_is_one_query_whatever_the_size_of_the_tree(registered, desks):
    """It was three (the active-turn check, a grouping over every turn of the tree, the events
    query) at every poll of every open stream."""
    user, run = fan_out(registered, desks)
    view = EventStream()
    latest = Event.objects.filter(root_turn_id=run.id).order_by("id").last()
    cursor = open_cursor(view, user, run.id, after=latest.pk)
    assert poll(view, cursor) == ([WAITING], False, 1)
    assert poll(view, cursor) == ([WAITING], False, 1)


def test_unreadable_events_move_the_cursor_and_idle_polls_stay_one_query(registered):
    """The helpdesk's conversations are not the reader's: their events are skipped (not sent)
    but the cursor moves past them, so the next poll finds nothing new in one query."""
    user, run = fan_out(registered, 3)
    for turn in list(Turn.objects.filter(root_turn_id=run.id).active())[:2]:
        services.run_turn(turn.pk)  # the third keeps the tree active
    rows = list(Event.objects.filter(root_turn_id=run.id).order_by("id"))
    own = [e.pk for e in rows if e.conversation_id == run.row.conversation_id]
    assert len(own) < len(rows)  # the continuations wrote events in the desks' conversations
    view = EventStream()
    cursor = open_cursor(view, user, run.id)

    frames, done, _ = poll(view, cursor)
    assert not done and ids(frames) == [f"id: {pk}" for pk in own]
    assert "SECRET" not in "".join(frames)
    assert cursor.after == rows[-1].pk
    assert poll(view, cursor) == ([WAITING], False, 1)


def test_a_poll_reads_at_most_a_batch_and_ends_the_stream_once_all_was_sent(registered):
    user, run = fan_out(registered, 2)
    for turn in Turn.objects.filter(root_turn_id=run.id).active():
        services.run_turn(turn.pk)
    view = EventStream()
    view.batch_size = 2
    cursor = open_cursor(view, user, run.id)
    own = list(Event.objects.filter(root_turn_id=run.id,
                                    conversation_id=run.row.conversation_id)
               .order_by("id").values_list("id", flat=True))
    sent: list[str] = []
    for _ in range(50):
        frames, done, _count = poll(view, cursor)
        sent += frames
        if done:
            break
    assert sent[-1] == END and WAITING not in sent
    assert ids(sent) == [f"id: {pk}" for pk in own]
