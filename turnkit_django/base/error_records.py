"""Error records: what went wrong, stored on a turn, given to the model, or written by a repair.

One type, :class:`ErrorRecord`, for every failure the package records. It is stored in two JSON
shapes because two audiences read it:

* ``Turn.error`` (what applications read: ``run.error``): ``{"type": ..., "message": ..., ...}``
  where ``type`` names the exception or the cause (``BudgetExceeded``, ``Cancelled``, ``Stale``);
* a failed tool result (what the model reads): ``{"error": ..., "message": ..., ...}`` where
  ``error`` is a short code (``invalid_arguments``, ``outcome_unknown``, ``not_authorized``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..exceptions import BudgetExceeded
from .serialization import JsonObject, JsonValue

OUTCOME_UNKNOWN = (
    "The tool was interrupted before its result was recorded, so its outcome is unknown: it may "
    "or may not have taken effect. Check its effect before calling it again."
)


@dataclass(frozen=True)
class ErrorRecord:
    """A failure: a machine-readable ``code``, a readable ``message`` and optional details."""

    code: str
    message: str
    details: Mapping[str, JsonValue] = field(default_factory=dict)

    def for_model(self) -> dict[str, JsonValue]:
        """The failed tool result the model reads."""
        return {"error": self.code, "message": self.message, **self.details}

    def for_turn(self) -> dict[str, JsonValue]:
        """The record stored in ``Turn.error``."""
        return {"type": self.code, "message": self.message, **self.details}

    def with_details(self, **details: JsonValue) -> ErrorRecord:
        return ErrorRecord(self.code, self.message, {**self.details, **details})

    @classmethod
    def of(cls, exc: BaseException, **details: JsonValue) -> ErrorRecord:
        """The record of an exception: its class name and message (budget reason and limit)."""
        extra: dict[str, JsonValue] = {}
        if isinstance(exc, BudgetExceeded):
            extra = {"reason": exc.reason, "limit": exc.limit}
        return cls(type(exc).__name__, str(exc), {**extra, **details})


def outcome_unknown() -> ErrorRecord:
    """A tool call whose worker died (or was fenced out) mid-call."""
    return ErrorRecord("outcome_unknown", OUTCOME_UNKNOWN)


def not_executed(reason: str) -> ErrorRecord:
    """A tool call that never ran (after a terminal tool, a cancel, a failure)."""
    return ErrorRecord("not_executed", f"Not executed: {reason}.")


def not_authorized(message: str) -> ErrorRecord:
    return ErrorRecord("not_authorized", message)


def invalid_arguments(tool: str) -> ErrorRecord:
    """Arguments that are not a JSON object (or one nested too deeply to read)."""
    return ErrorRecord("invalid_arguments", f"The arguments for {tool!r} are not a JSON object "
                                            "nested at most 64 levels deep; send a JSON object "
                                            "matching the tool's schema.")


def budget_exceeded(reason: str) -> ErrorRecord:
    return ErrorRecord("budget_exceeded", reason)


def unknown_result() -> dict[str, JsonValue]:
    """The tool result of a call whose outcome is unknown, as the model reads it."""
    return outcome_unknown().for_model()


__all__ = [
    "OUTCOME_UNKNOWN",
    "ErrorRecord",
    "JsonObject",
    "budget_exceeded",
    "invalid_arguments",
    "not_authorized",
    "not_executed",
    "outcome_unknown",
    "unknown_result",
]
