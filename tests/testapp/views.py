"""Views that call agents the way applications do (for the ATOMIC_REQUESTS tests), and the
media files of the browser tier (what a project's web server would serve)."""

from __future__ import annotations

from django.conf import settings
from django.db import transaction
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.views.static import serve

from turnkit_django import Agent
from turnkit_django.testing import ScriptedClient, reply


def _agent() -> Agent:
    return Agent("view_agent", client=ScriptedClient([reply("answered in a view")]))


def run_inline(request: HttpRequest) -> JsonResponse:
    run = _agent().run("help")
    return JsonResponse({"status": run.status, "output": run.output_text})


@transaction.non_atomic_requests
def run_inline_outside_the_request_transaction(request: HttpRequest) -> JsonResponse:
    return run_inline(request)


def submit(request: HttpRequest) -> JsonResponse:
    run = _agent().submit("help later")
    return JsonResponse({"status": run.status, "id": run.id})


def media(request: HttpRequest, path: str) -> HttpResponse:
    """Serve a file of ``MEDIA_ROOT`` (read at request time: tests change it)."""
    return serve(request, path, document_root=settings.MEDIA_ROOT)
