"""Handing turns to background execution: the submit transition and the doorbell.

Celery is only a doorbell (R1 in the reliability notes): :func:`dispatch` rings it once the
current transaction commits (never before; dropped on rollback), and a lost ring is repaired by
maintenance, which re-rings what is claimable.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.utils.module_loading import import_string

from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from ..store import tenants, turns
from ..store.commits import after_commit
from .authorization import authorize

if TYPE_CHECKING:
    from ..models import Conversation, Turn

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


def dispatch(turn_id: str, *, submitted: Turn | None = None) -> None:
    """Ring the doorbell for ``turn_id`` once the current transaction commits.

    For a turn just ``submitted`` (its row), only if its tenant has room for it then
    (:func:`tenant_has_room`): a turn its ``TENANT_LIMITS`` would refuse gets no doorbell.
    """

    def send() -> None:
        if submitted is not None and not tenant_has_room(submitted):
            return
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

    after_commit(send)


def tenant_has_room(turn: Turn) -> bool:
    """Whether a claim of the submitted ``turn`` would find a place under its tenant's
    ``TENANT_LIMITS``: fewer running turns of its tenant, plus its pending turns at the head of
    their lanes submitted before it, than ``concurrency``. True without a limit, and when the
    reads fail (a needless doorbell is refused by the claim; a missing one waits for maintenance).

    Read after the submission committed: a turn of the tenant ending later rings the oldest
    waiting turns of the tenant (``services.recovery.ring_tenant``) after its own commit, and
    sees this one; one that ended before left its place, which this read sees. So a burst rings
    ``concurrency`` doorbells, not one a turn that a worker must take only to be refused.
    Two reads (:func:`~turnkit_django.store.tenants.has_room`).
    """
    limits = turnkit_settings.TENANT_LIMITS
    if limits is None or turn.tenant is None or turn.submitted_at is None:
        return True
    try:
        return tenants.has_room(turn.tenant, turn.submitted_at, turn.pk, limits.concurrency)
    except Exception:  # ring when in doubt: the claim decides again
        logger.debug("could not count the tenant of turn %s", turn.pk, exc_info=True)
        return True


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
        dispatch(row.pk, submitted=row)
    return row


__all__ = ["CELERY_DISPATCHER", "authorize_callback", "dispatch", "submit", "tenant_has_room"]
