"""Durable retries of a tool call: ``@tool(retries=N, retry_on=(...), backoff=seconds)``.

A call whose tool raised an exception its ``retry_on`` matches is tried again, up to ``retries``
times, after a backoff: ``backoff`` seconds, doubled for each next retry, with up to 20% jitter,
capped at :data:`MAX_BACKOFF`. Each failed attempt is recorded on the execution
(``attempt_log``: its number, its error, when the next one is due) in a fenced statement of its
own *before* the wait, and the wait runs inside ``ctx.waiting_for`` (no database session held,
the heartbeat running). A worker that dies during an attempt or a wait leaves the log: the
resumed turn (the tool is replay-safe, so recovery runs the call again) waits what is left of
the backoff and continues with the next attempt number; one that died after recording the last
attempt gives that attempt's error at once.

Exhausted retries (or a next attempt the tree's deadline would come before) are the last
error, with ``attempts``, as the result the model reads; an exception ``retry_on`` does not
match is not retried. Each retry emits ``tool.retrying``. A background turn's worker asked to
shut down during a backoff stops waiting and hands the turn back
(:mod:`turnkit_django.base.shutdown`): the call goes back to ``pending`` and the next worker
waits the rest of the backoff.
"""

from __future__ import annotations

import random
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING

from django.utils import timezone

from ..base import failpoints, shutdown
from ..base.error_records import ErrorRecord
from ..base.serialization import JsonObject, JsonValue
from ..exceptions import LostClaim
from ..messages import ToolCallPart
from ..store import record_attempt
from ..tools.tool import Tool
from .context import TurnContext

if TYPE_CHECKING:
    from ..models import ToolExecution

#: The longest wait between two attempts, in seconds.
MAX_BACKOFF = 60.0


def retry_delay(backoff: float, attempt: int) -> float:
    """The wait after failed attempt number ``attempt``: exponential, jittered, capped."""
    base = min(backoff * 2.0 ** min(attempt - 1, 64), MAX_BACKOFF)
    return min(base * (1 + random.uniform(0, 0.2)), MAX_BACKOFF)  # noqa: S311 - not a secret


def pause(seconds: float, *, interruptible: bool = False) -> None:
    """Sleep between two attempts (tests replace it to see the waits); ``interruptible``: a
    stop request of this process (warm shutdown) ends the sleep early."""
    if interruptible:
        shutdown.sleep(seconds)
    else:
        time.sleep(seconds)


def run_attempts(ctx: TurnContext, tool: Tool, call: ToolCallPart, execution: ToolExecution,
                 limit: float | None, attempt: Callable[[], JsonValue]) -> JsonValue | ErrorRecord:
    """Run ``attempt`` (one call of the tool, timed by ``limit``) until it returns, raises an
    exception that is not retried, or the retries run out; an error is returned as a record."""
    log = execution.attempt_log or []
    if log and isinstance(last := log[-1], dict):
        if "retry_at" not in last:  # the last attempt was recorded, its result not written
            return _error(last, len(log))
        _wait(ctx, call.name, _remaining(last))  # the worker died during the backoff
    while True:
        try:
            with ctx.waiting_for("tool", call.name, limit):
                failpoints.hit("inside_tool")
                return attempt()
        except LostClaim:
            raise
        except Exception as exc:
            error = ErrorRecord(type(exc).__name__, str(exc))
            number = len(execution.attempt_log or []) + 1
            if not tool.retryable(exc):
                return error.with_details(attempts=number) if number > 1 else error
            wait = retry_delay(tool.backoff, number)
            retry = number <= tool.retries and not _past_deadline(ctx, wait)
            now = timezone.now()
            entry: JsonObject = {"attempt": number, "error": error.for_model(),
                                 "failed_at": now.isoformat()}
            if retry:
                entry.update(wait=round(wait, 3),
                             retry_at=(now + timedelta(seconds=wait)).isoformat())
            record_attempt(ctx.claim, execution, entry, retry=retry)
            if not retry:
                return error.with_details(attempts=number)
            ctx.emit("tool.retrying", id=call.id, name=call.name, attempt=number,
                     wait=round(wait, 3), error=error.code)
            failpoints.hit("before_tool_retry")
            _wait(ctx, call.name, wait)


def _wait(ctx: TurnContext, name: str, seconds: float) -> None:
    """Wait out a backoff; a background turn whose worker is asked to stop meanwhile is handed
    back at once (HandBack): the attempt log keeps when the next attempt is due."""
    if seconds > 0:
        with ctx.waiting_for("tool", name, None):  # the deadline still applies (overdue)
            pause(seconds, interruptible=ctx.background)
    ctx.check_stop()


def _past_deadline(ctx: TurnContext, wait: float) -> bool:
    """Whether the tree's deadline comes before the next attempt would start."""
    deadline, now = ctx.row.deadline_at, ctx.fenced.database_now()
    return deadline is not None and now is not None and now + timedelta(seconds=wait) >= deadline


def _remaining(entry: JsonObject) -> float:
    """What is left of the backoff recorded in ``entry`` (0 when it passed)."""
    try:
        due = datetime.fromisoformat(str(entry["retry_at"]))
    except ValueError:
        return 0.0
    return max(0.0, min((due - timezone.now()).total_seconds(), MAX_BACKOFF))


def _error(entry: JsonObject, attempts: int) -> ErrorRecord:
    recorded = entry.get("error")
    error = recorded if isinstance(recorded, dict) else {}
    return ErrorRecord(str(error.get("error", "Exception")), str(error.get("message", "")),
                       {"attempts": attempts})


__all__ = ["MAX_BACKOFF", "pause", "retry_delay", "run_attempts"]
