"""What the turnkit admin shows and does beyond Django's defaults.

* The permission rule: ``turnkit.view_transcript`` gates everything a turn said or was given
  (transcripts, tool arguments and results, outputs, run context and options, principals,
  delivery payloads, full error records). Without it, staff with a view permission see statuses,
  positions, usage, costs, timings and error types and messages.
* Cancels: the actions and the turn page's buttons call :func:`turnkit_django.services.cancel`
  with the staff user as principal, need ``turnkit.cancel_turn``, and leave one ``LogEntry`` per
  turn they changed.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.contrib import messages
from django.contrib.admin.models import CHANGE, LogEntry
from django.db import models
from django.db.models import Count, QuerySet, Window
from django.http import HttpRequest
from django.urls import NoReverseMatch, reverse
from django.utils.html import format_html
from django.utils.translation import gettext as _
from django.utils.translation import ngettext

from ..base.serialization import JsonObject
from ..base.states import ACTIVE_TURN_STATUSES
from ..exceptions import AuthorizationError, TurnkitError
from ..models import Conversation, Turn
from ..runtime.authorization import TRANSCRIPT_PERMISSION
from ..services import CancelReport, cancel
from ..store import lease_of, provider_waits
from .formatting import format_when as when
from .formatting import pretty_json, ran_seconds, seconds_between
from .timeline import Totals, Tree, load_tree, turn_transcript

CANCEL_PERMISSION = "turnkit.cancel_turn"
#: How many forks of a conversation, or retries of a run, its page lists (all are counted).
LINKED_LIMIT = 20


def can_read_transcripts(request: HttpRequest) -> bool:
    """Whether the user may read transcripts, run context, outputs and principals."""
    return request.user.has_perm(TRANSCRIPT_PERMISSION)


def can_cancel(request: HttpRequest) -> bool:
    return request.user.has_perm(CANCEL_PERMISSION)


def operator_principal(request: HttpRequest) -> JsonObject:
    """The principal admin actions act for: the staff user, marked as staff."""
    return {"user": request.user.pk, "staff": True}


# ---------------------------------------------------------------------------------- cancelling


@dataclass
class CancelOutcome:
    """What cancelling some turns from the admin did."""

    cancelled: int = 0
    unchanged: int = 0
    refused: list[str] = field(default_factory=list)

    def report_to(self, request: HttpRequest) -> None:
        """Tell the user, with Django's messages."""
        if self.cancelled:
            messages.success(request, ngettext(
                "%(count)d turn was cancelled.", "%(count)d turns were cancelled.",
                self.cancelled) % {"count": self.cancelled})
        if self.unchanged:
            messages.warning(request, ngettext(
                "%(count)d turn had already finished; nothing changed.",
                "%(count)d turns had already finished; nothing changed.",
                self.unchanged) % {"count": self.unchanged})
        if self.refused:
            messages.error(request, ngettext(
                "%(count)d turn could not be cancelled: %(turns)s.",
                "%(count)d turns could not be cancelled: %(turns)s.",
                len(self.refused)) % {"count": len(self.refused),
                                      "turns": ", ".join(self.refused)})


def cancel_turns(request: HttpRequest, turn_ids: list[str], *, cascade: bool) -> CancelOutcome:
    """Cancel each turn as the staff user, log every change, and collect what happened."""
    outcome = CancelOutcome()
    for turn_id in turn_ids:
        try:
            report = cancel(turn_id, cascade=cascade, principal=operator_principal(request))
        except AuthorizationError:
            outcome.refused.append(_("%(turn)s (not authorized)") % {"turn": turn_id})
            continue
        except (TurnkitError, Turn.DoesNotExist) as exc:
            outcome.refused.append(f"{turn_id} ({exc})")
            continue
        log_cancel(request, report)
        outcome.cancelled += len(report.cancelled)
        if not report.changed:
            outcome.unchanged += 1
    return outcome


def log_cancel(request: HttpRequest, report: CancelReport) -> None:
    """One admin ``LogEntry`` (History) for the target and for each descendant it cancelled."""
    if not report.changed:
        return
    descendants = [pk for pk in report.cancelled if pk != report.turn_id]
    if len(descendants) == len(report.cancelled):  # the target had finished: only below it
        message = ngettext(
            "Its descendants were cancelled (%(count)d turn); the turn itself had already "
            "finished.", "Its descendants were cancelled (%(count)d turns); the turn itself "
            "had already finished.", len(descendants)) % {"count": len(descendants)}
    elif report.cascade:
        message = ngettext("Cancelled with descendants (%(count)d turn cancelled).",
                           "Cancelled with descendants (%(count)d turns cancelled).",
                           len(report.cancelled)) % {"count": len(report.cancelled)}
    else:
        message = _("Cancelled.")
    user_id: Any = request.user.pk
    LogEntry.objects.log_actions(user_id, Turn.objects.filter(pk=report.turn_id), CHANGE,
                                 message)
    if descendants:
        LogEntry.objects.log_actions(
            user_id, Turn.objects.filter(pk__in=descendants), CHANGE,
            _("Cancelled with its ancestor turn %(turn)s.") % {"turn": report.turn_id})


# ------------------------------------------------------------------------------ what is shown


def admin_link(obj_or_model: Any, pk: Any, text: Any = None) -> str:
    """A link to the admin page of a row (its id as text when not in the admin)."""
    opts = obj_or_model._meta
    try:
        url = reverse(f"admin:{opts.app_label}_{opts.model_name}_change", args=[pk])
    except NoReverseMatch:
        return format_html("{}", text or pk)
    return format_html('<a href="{}">{}</a>', url, text or pk)


def display_value(instance: models.Model, model_field: models.Field) -> str:
    """One stored value as HTML: links for foreign keys, JSON indented, times to the second."""
    if model_field.is_relation and model_field.many_to_one:
        pk = getattr(instance, model_field.attname)
        related = model_field.related_model
        if pk in (None, "") or not isinstance(related, type):
            return "—"
        return admin_link(related, pk)
    value = getattr(instance, model_field.attname)
    if value is None:
        return "—"
    if isinstance(model_field, models.JSONField):
        return format_html('<pre class="tk-json">{}</pre>', pretty_json(value))
    if isinstance(model_field, models.BooleanField):
        return _("yes") if value else _("no")
    if isinstance(model_field, models.DateTimeField):
        return when(value)
    if isinstance(value, Decimal):
        return format_html("{}", format(value.normalize(), "f"))
    return format_html("{}", value)


def field_rows(instance: models.Model, hidden: frozenset[str]) -> list[tuple[str, str]]:
    """(label, HTML value) for every stored field but ``hidden``."""
    return [(str(f.verbose_name), display_value(instance, f))
            for f in instance._meta.concrete_fields if f.name not in hidden]


def error_summary(error: Any) -> str:
    """``Type: message`` of an error record (what staff without the transcript permission see)."""
    if not error:
        return ""
    if isinstance(error, dict):
        kind, text = error.get("type") or _("Error"), error.get("message") or ""
        return f"{kind}: {text}" if text else str(kind)
    return str(error)


@dataclass
class Linked:
    """The first :data:`LINKED_LIMIT` forks or retries of a row, oldest first, and their
    number."""

    rows: list[dict[str, Any]]
    count: int

    @property
    def more(self) -> int:
        """How many are counted but not listed."""
        return self.count - len(self.rows)


def linked(queryset: QuerySet[Any], *fields: str) -> Linked:
    """``fields`` of the first :data:`LINKED_LIMIT` rows of ``queryset`` and their total
    number, in one query (a window count), however many rows there are."""
    rows = list(queryset.annotate(tk_total=Window(Count("pk"))).order_by("created_at", "pk")
                .values(*fields, "tk_total")[:LINKED_LIMIT])
    return Linked(rows, rows[0]["tk_total"] if rows else 0)


def forks_of(conversation: Conversation) -> Linked:
    """The conversations forked from ``conversation`` (``conv.fork()``)."""
    return linked(Conversation.objects.filter(forked_from_id=conversation.pk),
                  "pk", "created_at", "forked_at")


def turn_console(request: HttpRequest, turn: Turn) -> dict[str, object]:
    """The context of a turn's page: facts, totals, timings, transcript, tree and retries
    (four queries)."""
    tree = load_tree(turn)
    current = tree.by_id.get(turn.pk, turn)
    readable = can_read_transcripts(request)
    started = current.started_at
    return {
        "tk_turn": current,
        "tk_readable": readable,
        "tk_principal": pretty_json(current.principal) if readable else "",
        "tk_error": error_summary(current.error),
        "tk_error_json": pretty_json(current.error) if readable and current.error else "",
        "tk_totals_rows": _totals_rows(tree, current),
        "tk_timings": [
            (_("created"), current.created_at),
            (_("submitted"), current.submitted_at),
            (_("started"), started),
            (_("last heartbeat"), lease_of(current.pk)),
            (_("completed"), current.completed_at),
        ],
        "tk_provider_wait": provider_waits.waiting_of(current.pk),
        "tk_queued": seconds_between(current.submitted_at, started),
        "tk_took": ran_seconds(current),
        "tk_tree_rows": tree.in_parent_order(),
        "tk_retries": linked(Turn.objects.filter(retry_of_id=current.pk),
                             "pk", "status", "created_at"),
        "tk_transcript": turn_transcript(current, tree) if readable else None,
        "tk_can_cancel": can_cancel(request),
        "tk_cancellable": current.status in ACTIVE_TURN_STATUSES,
        "tk_cascade_cancellable": bool(tree.active_in(current)),
    }


def _totals_rows(tree: Tree, turn: Turn) -> list[tuple[str, Totals]]:
    """This turn's usage and cost, its subtree's (when it differs) and the whole tree's."""
    subtree = tree.subtree(turn)
    rows = [(_("this turn"), Totals.of([turn]))]
    if len(subtree) > 1 and not turn.is_root:
        rows.append((_("this turn and its sub-agents"), Totals.of(subtree)))
    rows.append((_("whole tree"), tree.totals()))
    return rows
