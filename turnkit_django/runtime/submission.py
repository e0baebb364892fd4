"""Handing turns to background execution: the submit transition and the doorbell.

Celery is only a doorbell (R1 in the reliability notes): :func:`dispatch` rings it once the
current transaction commits (never before; dropped on rollback), and a lost ring is repaired by
maintenance, which re-rings what is claimable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils.module_loading import import_string

from ..authorization import authorize
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from ..models import Conversation, Turn
from ..store import turns

logger = logging.getLogger("turnkit_django.runtime")

#: The dispatcher used when ``TURNKIT["DISPATCHER"]`` is not set: the Celery task. Named by its
#: path so the runtime does not import the Celery entry point.
CELERY_DISPATCHER = "turnkit_django.celery.enqueue_turn"


def _dispatcher() -> Callable[[str], Any]:
    configured: Callable[[str], Any] | None = turnkit_settings.DISPATCHER
    if configured is not None:
        return configured
    try:
        default: Callable[[str], Any] = import_string(CELERY_DISPATCHER)
    except ModuleNotFoundError as exc:
        if (exc.name or "").partition(".")[0] not in ("celery", "kombu"):
            raise
        raise ConfigurationError(NO_CELERY) from None
    return default


#: Why a doorbell cannot ring without Celery, and what to do (system check turnkit.W009).
NO_CELERY = ("Celery is not installed and TURNKIT['DISPATCHER'] is not set; pip install "
             "'turnkit-django[celery]' and set up the project's Celery app, or set "
             "TURNKIT['DISPATCHER'] (system check turnkit.W009). The turn stays pending until "
             "a dispatcher rings for it")


def dispatch(turn_id: str) -> None:
    """Ring the doorbell for ``turn_id`` once the current transaction commits."""

    def send() -> None:
        try:
            _dispatcher()(turn_id)
        except ConfigurationError as exc:  # nothing to retry until the setup is fixed
            logger.warning("could not dispatch turn %r: %s", turn_id, exc)
        except Exception as exc:
            # Celery is only a doorbell: maintenance re-dispatches what was lost. A condition
            # that heals by itself (the broker down) is one line; the traceback is at DEBUG.
            reason = " ".join(f"{type(exc).__name__}: {exc}".split())
            logger.warning("could not dispatch turn %r (%s); maintenance will re-dispatch it",
                           turn_id, reason, extra={"turnkit_turn_id": turn_id,
                                                   "turnkit_outcome": "not_dispatched"})
            logger.debug("dispatching turn %s failed", turn_id, exc_info=True)

    transaction.on_commit(send)


def authorize_callback(turn_id: str, principal: Any, callback: Conversation) -> None:
    """Ask the policy for ``callback`` (outside any transaction): may the turn's result be
    delivered to ``callback`` when it finishes?"""
    authorize("callback", principal=principal, turn_id=turn_id,
              destination_conversation_id=callback.pk, destination_principal=callback.principal)


def submit(turn: Turn, *, callback: Conversation | None = None,
           callback_authorized: bool = False) -> Turn:
    """Hand a pending turn to background execution (idempotent); return the row as it is now.

    A ``callback`` conversation receives the turn's result when it finishes; the ``callback``
    action is authorized for the turn's principal first (and again at completion), unless the
    caller did (``callback_authorized``, because it submits inside a transaction).
    """
    if callback is not None and not callback_authorized:
        authorize_callback(turn.pk, turn.principal, callback)
    row, new = turns.submit(turn, callback_conversation_id=None if callback is None
                            else callback.pk)
    if new:  # after the submit's commit, or the caller's when it submits inside its transaction
        dispatch(row.pk)
    return row


__all__ = ["CELERY_DISPATCHER", "authorize_callback", "dispatch", "submit"]
