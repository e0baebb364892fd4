"""The failed attempts of a tool call with retries (``ToolExecution.attempt_log``).

A worker records each failed attempt of a call it runs before it waits to try again, in one
statement of its own guarded by its claim's fence (:class:`LostClaim` when another worker took
the turn over): a turn resumed after the worker died reads the log and continues from the
recorded attempt count.
"""

from __future__ import annotations

from django.db.models import F
from django.db.models.functions import Now

from ..base.serialization import JsonObject, JsonValue
from ..base.states import ToolStatus
from ..exceptions import LostClaim
from ..models import ToolExecution
from .claims import Claim


def record_attempt(claim: Claim, execution: ToolExecution, entry: JsonObject, *,
                   retry: bool) -> None:
    """Append ``entry`` to the running ``execution``'s attempt log (and to the row in memory);
    ``retry``: another attempt follows, counted in ``attempts`` now."""
    log: list[JsonValue] = [*(execution.attempt_log or []), entry]
    changes: dict[str, object] = {"attempt_log": log, "updated_at": Now()}
    if retry:
        changes["attempts"] = F("attempts") + 1
    if not ToolExecution.objects.filter(pk=execution.pk, status=ToolStatus.RUNNING,
                                        fence=claim.fence).update(**changes):
        raise LostClaim(claim.turn_id, claim.fence)
    execution.attempt_log = log


__all__ = ["record_attempt"]
