"""What a worker says about each turn it was asked to run: one log line per outcome.

Logger ``turnkit_django.worker``. Each record carries the turn's facts as flat ``extra=``
attributes, so a JSON log formatter picks them up (docs/howto/celery.md, "Logs"):

* ``turnkit_turn_id``, ``turnkit_agent``, ``turnkit_conversation_id``;
* ``turnkit_outcome``: ``completed``, ``failed``, ``waiting``, ``paused``, ``handed_back``,
  ``fenced_out``, ``not_claimable`` (a duplicate or late delivery: DEBUG), and from
  reconciliation ``recovered``, ``dead_lettered``, ``stale`` (WARNING);
* ``turnkit_steps``: the model and tools steps this execution ran;
* ``turnkit_duration``: seconds this execution took (not the turn's whole life);
* ``turnkit_taken_by``: for ``fenced_out``, who took the turn (``cancel``, ``reconcile``, or
  the worker that holds it now), else None.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from ..base.states import TurnStatus
from ..models import Turn
from ..runtime.loop import Executed

logger = logging.getLogger("turnkit_django.worker")

#: A claim-ending transition this worker wrote, and the outcome it is.
_OUTCOMES = {
    "publish": "completed",
    "fail": "failed",
    "suspend": "waiting",
    "hand_back": "handed_back",
    "pause_at_boundary": "paused",
    "await_approval": "paused",
    "await_child": "paused",
}
_WORDS = {
    "waiting": "is waiting for other turns",
    "handed_back": "handed back",
    "fenced_out": "fenced out",
}
_DETAILS = {
    "await_approval": ": a tool call waits for approval",
    "await_child": ": its inline sub-agent stopped",
}


@dataclass(frozen=True)
class TurnOutcome:
    """How one execution of a submitted turn ended (see the module doc for the fields)."""

    turn_id: str
    outcome: str
    agent: str = ""
    conversation_id: str = ""
    steps: int = 0
    duration: float = 0.0
    taken_by: str | None = None
    detail: str = ""

    @property
    def ran(self) -> bool:
        return self.outcome != "not_claimable"

    def summary(self) -> dict[str, object]:
        """The Celery task's return value (what its "succeeded" line shows)."""
        summary: dict[str, object] = {"turn_id": self.turn_id, "agent": self.agent,
                                      "outcome": self.outcome}
        if self.ran:
            summary.update(steps=self.steps, duration=self.duration)
        return summary

    def extra(self) -> dict[str, object]:
        return {"turnkit_turn_id": self.turn_id, "turnkit_agent": self.agent,
                "turnkit_conversation_id": self.conversation_id,
                "turnkit_outcome": self.outcome, "turnkit_steps": self.steps,
                "turnkit_duration": self.duration, "turnkit_taken_by": self.taken_by}


def outcome_of(turn_id: str, executed: Executed, duration: float) -> TurnOutcome:
    """The outcome of an execution; a lost claim reads the turn once to say who took it."""
    if not executed.ran:
        return TurnOutcome(turn_id, "not_claimable")
    taken_by: str | None = None
    if executed.ended_by is not None:
        outcome = _OUTCOMES.get(executed.ended_by, executed.ended_by)
        detail = _DETAILS.get(executed.ended_by, "")
    else:
        outcome = "fenced_out"
        taken_by, detail = _taker(turn_id)
    return TurnOutcome(turn_id, outcome, executed.agent, executed.conversation_id,
                       executed.steps, round(duration, 3), taken_by, detail)


def _taker(turn_id: str) -> tuple[str, str]:
    """Who moved the turn's fence while this worker ran it, as the turn's row tells."""
    row = Turn.objects.filter(pk=turn_id).values_list("status", "claimed_by", "error").first()
    if row is None:
        return "unknown", ": the turn was deleted while it ran"
    status, claimed_by, error = row
    if status == TurnStatus.CANCELLED:
        return "cancel", ": the turn was cancelled while it ran"
    if status == TurnStatus.RUNNING:
        return claimed_by, f": {claimed_by} runs it now (this worker's lease had expired)"
    if status == TurnStatus.FAILED and (error or {}).get("type") == "DeadLetter":
        return "reconcile", ": reconcile dead-lettered it (this worker's lease had expired)"
    if status in (TurnStatus.PENDING, TurnStatus.WAITING):
        return "reconcile", ": reconcile requeued it (this worker's lease had expired)"
    return str(status), f": the turn is {status} now"


def log_outcome(outcome: TurnOutcome) -> None:
    """One line: INFO, or DEBUG for a delivery that found nothing to run."""
    if not outcome.ran:
        logger.debug("turn %s not claimable (a duplicate or late delivery): nothing to run",
                     outcome.turn_id, extra=outcome.extra())
        return
    logger.info("turn %s (%s) %s in %.2fs after %d step%s%s", outcome.turn_id, outcome.agent,
                _WORDS.get(outcome.outcome, outcome.outcome), outcome.duration, outcome.steps,
                "" if outcome.steps == 1 else "s", outcome.detail, extra=outcome.extra())


def log_recovery(turn: Turn, outcome: str, reason: str) -> None:
    """One WARNING line for a turn reconciliation recovered, dead-lettered or made stale."""
    words = {"recovered": "recovered and re-dispatched", "dead_lettered": "dead-lettered",
             "stale": "made stale"}[outcome]
    logger.warning("turn %s (%s) %s: %s", turn.pk, turn.agent_name, words, reason,
                   extra={"turnkit_turn_id": turn.pk, "turnkit_agent": turn.agent_name,
                          "turnkit_conversation_id": turn.conversation_id,
                          "turnkit_outcome": outcome, "turnkit_steps": 0,
                          "turnkit_duration": 0.0, "turnkit_taken_by": None})


__all__ = ["TurnOutcome", "log_outcome", "log_recovery", "outcome_of"]
