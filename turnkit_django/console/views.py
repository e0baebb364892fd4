"""A run's durable events as Server-Sent Events, and a minimal live page (no build step).

``path("turnkit/", include("turnkit_django.urls"))`` serves:

* ``runs/<id>/events``: an async view streaming the tree's event rows after the cursor the
  client sends (``Last-Event-ID``, as a browser's ``EventSource`` does on reconnect, or
  ``?after=``), each as ``id: <event id>``, ``event: <type>``, ``data: <json>``. A refresh or a
  dropped connection resumes exactly after the last event received: no gap, no duplicate. The
  stream ends with an ``end`` event once no turn of the run's tree is active (the root and any
  continuation that joined it) and every event was sent, and
  after ``max_seconds`` otherwise (the browser reconnects with its cursor).
* ``runs/<id>/``: a page showing the live transcript and the pending approvals.

Both require a logged-in user and authorize ``read_messages`` for the principal
:meth:`EventStream.principal` gives (``{"user": pk}``; override it for your own shape). Without an
``AUTHORIZATION_POLICY`` (which otherwise allows every action), a run is shown only to the user
it was started for (its principal is the one the view gives) and to users with the permission
``turnkit.view_transcript``, as in the admin: a logged-in user cannot read other users' runs.

A tree can span conversations of other principals (a delivery's continuation acts for the
destination's principal inside the sender's tree): the stream shows only the events of the
conversations the reader may read (:func:`readable`; who may read what is in
:mod:`turnkit_django.console.run_access`), each decided when it appears and again when
a turn acting for another principal joins it (a refused one stays refused).

While a model call of the tree streams, its chunks arrive between the durable frames as
``event: message.delta`` frames with no ``id:`` (a reconnect resumes from the last durable event;
the step's ``message.created`` supersedes its deltas), their data the JSON ``{turn_id, fence,
index, kind, text}``. The stream subscribes to the run's delta channel before its first poll and
waits on it between polls, holding no database connection. It sends the deltas of the turns
whose conversation it shows, and drops a delta of an older fence than the latest it sent for
that turn (a turn recovered after a crash streams its step again).
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from importlib import import_module
from typing import Any

from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user
from django.core.handlers.asgi import ASGIRequest
from django.db import connections, transaction
from django.db.models import Exists
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseBadRequest,
    HttpResponseBase,
    StreamingHttpResponse,
)
from django.shortcuts import render
from django.urls import reverse
from django.views import View

from ..base.databases import unit
from ..conf.deltas import Delta
from ..exceptions import InputError
from ..models import Event, Turn
from ..services.reading import Readable
from ..services.streaming import FenceFilter, subscribe
from ..store.input_checks import cursor
from .run_access import allowed_run, principal_of, readable


def _cursor(request: HttpRequest) -> int | None:
    """The event id the client read last (``Last-Event-ID``, else ``?after=``, else 0); None
    when it is not one (:func:`~turnkit_django.store.input_checks.cursor`): read as 0, it would send
    every event again."""
    raw = (request.headers.get("Last-Event-ID") or request.GET.get("after") or "0").strip()
    try:
        return cursor(raw, "the event stream")
    except InputError:
        return None


def _news(run_id: str, after: int) -> tuple[bool, bool]:
    """Whether a turn of the run's tree is active (the root, a sub-agent, a continuation that
    joined it after the root finished) and whether an event follows ``after``: ONE query, two
    ``EXISTS`` over indexed columns (``turnkit_turn.root_turn_id``, ``turnkit_event (root_turn,
    id)``) that stop at their first row, whatever the size of the tree. A deleted run is
    finished, with nothing new."""
    found = (Turn.objects.filter(pk=run_id).order_by()
             .annotate(busy=Exists(Turn.objects.filter(root_turn_id=run_id).active()),
                       new=Exists(Event.objects.filter(root_turn_id=run_id, id__gt=after)))
             .values_list("busy", "new")[:1])
    return next(iter(found), (False, False))


def _batch(run_id: str, after: int, size: int,
          readable: Readable) -> tuple[list[Event], list[Event]]:
    """Up to ``size`` events after ``after`` (of every conversation of the tree) and those of
    them the reader may see. The stream's cursor moves to the last one read, past the events of
    conversations the reader may not read (else each poll would find them new and read them
    again). The conversations are decided after the events were read, so the conversation of
    every event read is known then (a turn commits before or with its events)."""
    rows = list(Event.objects.filter(root_turn_id=run_id, id__gt=after).order_by("id")[:size])
    allowed = readable.refresh() if rows else set()
    shown = [event for event in rows if event.conversation_id in allowed]
    return rows, shown


@dataclass
class Cursor:
    """Where one stream is: its run, the last event sent and the conversations it shows."""

    request: HttpRequest
    run_id: str
    principal: Any
    after: int
    shown: Readable
    #: When the reader's authorization was last checked (time.monotonic()).
    checked_at: float = field(default_factory=time.monotonic)
    #: The conversation of each turn of the tree a delta came from.
    turns: dict[str, str] = field(default_factory=dict)
    fences: FenceFilter = field(default_factory=FenceFilter)
    #: The turns whose assistant message the last poll read: their deltas received during it
    #: are superseded.
    committed: set[str] = field(default_factory=set)


RETRY = "retry: 1000\n\n"
END = "event: end\ndata: {}\n\n"
WAITING = ": waiting\n\n"  # a comment: keeps proxies from closing an idle stream


def frame(event: Event) -> str:
    """One event as an SSE frame."""
    data = json.dumps({"id": event.pk, "type": event.type, "turn_id": event.turn_id,
                       "conversation_id": event.conversation_id, "payload": event.payload,
                       "created_at": event.created_at.isoformat()}, separators=(",", ":"))
    return f"id: {event.pk}\nevent: {event.type}\ndata: {data}\n\n"


def delta_frame(delta: Delta) -> str:
    """One delta as an SSE frame: no ``id:``, so the browser's cursor stays on the last event."""
    return f"event: message.delta\ndata: {json.dumps(delta.as_dict(), separators=(',', ':'))}\n\n"


class EventStream(View):
    """The SSE stream of a run's durable events (see the module docstring)."""

    #: Seconds between reads of the event table while nothing new arrived.
    poll_interval = 0.5
    #: Seconds a stream stays open; the browser reconnects from its cursor afterwards.
    max_seconds = 300.0
    batch_size = 200
    #: Seconds between checks that the reader may still read the run (logged out, permission
    #: revoked, policy changed: the stream closes).
    authorization_interval = 5.0

    @classmethod
    def as_view(cls, **initkwargs: Any) -> Any:
        """The view, outside ``ATOMIC_REQUESTS``' transaction on every database: Django refuses
        to wrap an async view in one (``RuntimeError``, a 500 at every request), and a stream
        must see each event as it commits, not one snapshot."""
        view = super().as_view(**initkwargs)
        for alias in connections:
            view = transaction.non_atomic_requests(using=alias)(view)
        return view

    def principal(self, request: HttpRequest) -> Any:
        return principal_of(request)

    async def get(self, request: HttpRequest, run_id: str) -> HttpResponseBase:
        return await self._answer(request, run_id, stream=True)

    async def head(self, request: HttpRequest, run_id: str) -> HttpResponseBase:
        """The stream's status and headers, without running the stream (nobody reads it)."""
        return await self._answer(request, run_id, stream=False)

    async def _answer(self, request: HttpRequest, run_id: str, *,
                      stream: bool) -> HttpResponseBase:
        cursor = await sync_to_async(unit)(self._open, request, run_id)
        if cursor is None:
            return HttpResponseBadRequest(
                "Last-Event-ID (or ?after=) must be the id of an event: a non-negative "
                "integer (0 for the start)", content_type="text/plain")
        response: HttpResponseBase
        if not stream:
            response = HttpResponse(content_type="text/event-stream")
        elif isinstance(request, ASGIRequest):
            response = StreamingHttpResponse(self.stream(cursor),
                                             content_type="text/event-stream")
        else:  # WSGI consumes an async iterator whole before sending a byte
            response = StreamingHttpResponse(self.stream_sync(cursor),
                                             content_type="text/event-stream")
        response["Cache-Control"] = "no-cache"
        response["X-Accel-Buffering"] = "no"  # nginx: do not buffer the stream
        return response

    def _open(self, request: HttpRequest, run_id: str) -> Cursor | None:
        """The stream's starting point (None: the client's cursor is not an event id); 404 if
        the reader may not read the run."""
        principal = self.principal(request)
        root = allowed_run(request, run_id, principal)
        after = _cursor(request)
        if after is None:
            return None
        return Cursor(request, run_id, principal, after, readable(request, root, principal))

    def current_user(self, request: HttpRequest) -> Any:
        """The request's user as of now: its session read again from the session store (a
        logout, a password change or a deleted user makes it anonymous). Override it when your
        users do not authenticate with Django's session."""
        engine = import_module(settings.SESSION_ENGINE)
        request.session = engine.SessionStore(request.session.session_key)
        return get_user(request)

    def still_allowed(self, cursor: Cursor) -> bool:
        """Whether the reader may still read the run, checked as when the stream opened (the
        conversations it shows are decided afresh)."""
        request = cursor.request
        request.user = self.current_user(request)
        principal = self.principal(request)
        try:
            root = allowed_run(request, cursor.run_id, principal)
        except Http404:
            return False
        if principal != cursor.principal:
            return False
        cursor.shown = readable(request, root, principal)
        cursor.checked_at = time.monotonic()
        return True

    def poll(self, cursor: Cursor) -> tuple[list[str], bool]:
        """One read of the table: the frames to send (advancing the cursor) and whether the
        stream ends after them (every event sent and the run finished, or the reader may no
        longer read the run: checked every ``authorization_interval`` seconds)."""
        if time.monotonic() - cursor.checked_at >= self.authorization_interval \
                and not self.still_allowed(cursor):
            return [], True  # no ``end``: the run is not over; a reconnect gets 404
        cursor.committed = set()
        busy, new = _news(cursor.run_id, cursor.after)
        if not new:  # the usual poll: one query
            return ([WAITING], False) if busy else ([END], True)
        read, shown = _batch(cursor.run_id, cursor.after, self.batch_size, cursor.shown)
        frames = [frame(event) for event in shown]
        cursor.committed = {e.turn_id for e in read if e.type == "message.created"
                            and (e.payload or {}).get("role") == "assistant"}
        if read:
            cursor.after = read[-1].pk
        if not busy and len(read) < self.batch_size:  # busy was read before the events
            return [*frames, END], True
        if not frames and len(read) < self.batch_size:
            frames.append(WAITING)
        return frames, False

    def learn(self, cursor: Cursor, turns: set[str]) -> None:
        """The conversations of ``turns`` (of the run's tree), decided for the reader when new."""
        found = dict(Turn.objects.filter(root_turn_id=cursor.run_id, pk__in=sorted(turns))
                     .values_list("pk", "conversation_id"))
        cursor.turns.update(found)
        if any(conversation not in cursor.shown.decided for conversation in found.values()):
            cursor.shown.refresh()

    @staticmethod
    def _deltas(cursor: Cursor, received: list[Delta],
                skip: set[str] | None = None) -> tuple[list[Delta], set[str]]:
        """The deltas of the latest fences, and the turns whose conversation must be read or
        decided before they can be sent (usually none)."""
        fresh = list(cursor.fences(received, skip))
        unknown = {d.turn_id for d in fresh if d.turn_id not in cursor.turns
                   or cursor.turns[d.turn_id] not in cursor.shown.decided}
        return fresh, unknown

    @staticmethod
    def _delta_frames(cursor: Cursor, deltas: list[Delta]) -> list[str]:
        allowed = cursor.shown.allowed
        return [delta_frame(d) for d in deltas if cursor.turns.get(d.turn_id) in allowed]

    async def stream(self, cursor: Cursor) -> AsyncIterator[str]:
        """The stream under ASGI: each poll a short unit of database work (its connection
        closed after it), nothing held while it waits for deltas."""
        deadline = time.monotonic() + self.max_seconds
        yield RETRY
        subscription = await sync_to_async(subscribe, thread_sensitive=False)(cursor.run_id)
        get = sync_to_async(subscription.get if subscription else _nothing,
                            thread_sensitive=False)
        try:
            while time.monotonic() < deadline:
                frames, done = await sync_to_async(unit)(self.poll, cursor)
                late = await get(0) if not done else []
                for chunk in frames:
                    yield chunk
                received, skip = late, cursor.committed
                next_poll = time.monotonic() + self.poll_interval
                while not done:
                    deltas, unknown = self._deltas(cursor, received, skip)
                    if unknown:
                        await sync_to_async(unit)(self.learn, cursor, unknown)
                    for chunk in self._delta_frames(cursor, deltas):
                        yield chunk
                    left = min(next_poll, deadline) - time.monotonic()
                    if not (frames and frames[-1] is WAITING) or left <= 0:
                        break
                    received, skip = await get(left), set()
                if done:
                    return
        finally:
            if subscription is not None:
                await sync_to_async(subscription.close, thread_sensitive=False)()

    def stream_sync(self, cursor: Cursor) -> Iterator[str]:
        """The same stream under WSGI (the server's thread iterates it)."""
        deadline = time.monotonic() + self.max_seconds
        yield RETRY
        subscription = subscribe(cursor.run_id)
        get = subscription.get if subscription else _nothing
        try:
            while time.monotonic() < deadline:
                frames, done = unit(self.poll, cursor)
                late = get(0) if not done else []
                yield from frames
                received, skip = late, cursor.committed
                next_poll = time.monotonic() + self.poll_interval
                while not done:
                    deltas, unknown = self._deltas(cursor, received, skip)
                    if unknown:
                        unit(self.learn, cursor, unknown)
                    yield from self._delta_frames(cursor, deltas)
                    left = min(next_poll, deadline) - time.monotonic()
                    if not (frames and frames[-1] is WAITING) or left <= 0:
                        break
                    received, skip = get(left), set()
                if done:
                    return
        finally:
            if subscription is not None:
                subscription.close()


def _nothing(timeout: float) -> list[Delta]:
    """No delta channel: wait as the poll interval says."""
    time.sleep(timeout)
    return []


class RunPage(View):
    """A minimal live page of a run: its transcript and pending approvals, from the stream."""

    def principal(self, request: HttpRequest) -> Any:
        return principal_of(request)

    def get(self, request: HttpRequest, run_id: str) -> HttpResponse:
        root = allowed_run(request, run_id, self.principal(request))
        stream = reverse("turnkit:run-events", kwargs={"run_id": root.pk})
        return render(request, "turnkit_django/run.html",
                      {"run": root, "stream_url": stream})


event_stream = EventStream.as_view()
run_page = RunPage.as_view()

__all__ = ["EventStream", "RunPage", "event_stream", "frame", "principal_of", "run_page"]
