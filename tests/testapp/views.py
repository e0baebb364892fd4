"""Views that call agents the way applications do (for the ATOMIC_REQUESTS tests)."""

from __future__ import annotations

from django.db import transaction
from django.http import HttpRequest, JsonResponse

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
