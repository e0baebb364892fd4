"""Who may watch a run in the console's views (the event stream and the live page).

``principal_of`` is the principal the views act for; ``allowed_run`` returns the run's root turn
when the user may read it (else 404: nothing is disclosed); ``readable`` decides which of the
tree's conversations the stream shows. Without an ``AUTHORIZATION_POLICY`` a run is shown only to
the user it was started for and to users with ``turnkit.view_transcript``; with one, its
``read_messages`` answer decides.
"""

from __future__ import annotations

from typing import Any

from django.http import Http404, HttpRequest

from ..base.serialization import unstorable
from ..conf import turnkit_settings
from ..models import Turn
from ..runtime.authorization import TRANSCRIPT_PERMISSION, is_allowed
from ..services.reading import Readable, TreeConversation


def principal_of(request: HttpRequest) -> Any:
    """The principal the views act for: the logged-in user's id."""
    return {"user": request.user.pk}


def allowed_run(request: HttpRequest, run_id: str, principal: Any) -> Turn:
    """The run's root turn, if the user may read it (else 404: nothing is disclosed)."""
    if not request.user.is_authenticated:
        raise Http404("no such run")
    # An id no database can store names no run (PostgreSQL refuses the query: a 500).
    root = None if unstorable(run_id) is not None \
        else Turn.objects.filter(pk=run_id, root_turn_id=run_id).first()
    if root is None:
        raise Http404("no such run")
    if turnkit_settings.AUTHORIZATION_POLICY is None:  # no policy: the run's own user, or staff
        allowed = (root.principal is not None and root.principal == principal) \
            or request.user.has_perm(TRANSCRIPT_PERMISSION)
    else:
        allowed = is_allowed("read_messages", principal=principal, turn_id=root.pk,
                             conversation_id=root.conversation_id, turn_principal=root.principal)
    if not allowed:
        raise Http404("no such run")
    return root


def readable(request: HttpRequest, root: Turn, principal: Any) -> Readable:
    """Which of the tree's conversations the stream shows (see :class:`Readable`).

    With a policy, its ``read_messages`` answer for each conversation. Without one, as for the
    run itself: a user with ``turnkit.view_transcript`` sees every conversation, any other user
    those in which every turn of the tree acts for them (a continuation a delivery woke in
    another user's conversation acts for that user: its events are not shown). The run's own
    conversation was allowed by :func:`allowed_run`.
    """
    def own(conversation: TreeConversation) -> bool:
        return conversation.id == root.conversation_id or all(
            p == principal for p in conversation.turn_principals)

    if turnkit_settings.AUTHORIZATION_POLICY is not None:
        decide = None
    elif request.user.has_perm(TRANSCRIPT_PERMISSION):
        def decide(conversation: TreeConversation) -> bool:
            return True
    else:
        decide = own
    return Readable(root.pk, principal, decide)


__all__ = ["allowed_run", "principal_of", "readable"]
