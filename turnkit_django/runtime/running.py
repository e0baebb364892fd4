"""What the ``Turn`` handle can do as the running turn: evaluations and output metadata.

A tool (``ctx.turn``) or an output policy (its ``turn``) gets a handle bound to the claimed
turn's context; through it, :meth:`RunningTurn.internal_evaluation` and
:attr:`RunningTurn.output_metadata` write fenced, like the runtime's own steps. A handle the
application loaded (``load_turn``) is not bound: it can read them, not write them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..base.serialization import JsonMapping, JsonObject
from ..clients.evaluation import Evaluation, Evaluator, Question
from ..exceptions import TurnkitError
from . import evaluations
from .context import TurnContext

if TYPE_CHECKING:
    from ..models import Turn


class RunningTurn:
    """Mixin of :class:`turnkit_django.Turn` for the turn a tool or an output policy serves."""

    row: Turn
    _running: TurnContext | None = None

    def _context(self, what: str) -> TurnContext:
        running = self._running
        if running is None or running.row.pk != self.row.pk:
            raise TurnkitError(
                f"{what} needs turn {self.row.pk!r}'s running execution: use it on ctx.turn in a "
                "tool, or on the turn an output policy receives, while the turn runs"
            )
        return running

    def internal_evaluation(self, *, evaluator: Evaluator, model: str, purpose: str,
                            questions: Question | list[Question],
                            policy_version: str = "", candidate: object = evaluations.CURRENT,
                            max_attempts: int = 1, timeout: float = 30.0) -> Evaluation:
        """Ask ``evaluator`` typed questions about ``candidate`` (default: the turn's current
        candidate output), fenced and charged to the turn; an identical request returns its
        stored receipt without another charge. Raises EvaluationError when no valid answer
        came back, AuthorizationError when ``evaluate`` is refused, BudgetExceeded past the
        deadline or the spend limit."""
        return evaluations.evaluate(
            self._context("internal_evaluation()"), evaluator=evaluator, model=model,
            purpose=purpose, questions=questions, policy_version=policy_version,
            candidate=candidate, max_attempts=max_attempts, timeout=timeout)

    @property
    def output_metadata(self) -> JsonObject | None:
        """Assessment metadata of the current candidate (the published output, once done)."""
        running = self._running
        if running is not None and running.row.pk == self.row.pk:
            return running.state.output_metadata
        stored = (self.row.state or {}).get("output_metadata")
        return stored if isinstance(stored, dict) else None

    @output_metadata.setter
    def output_metadata(self, value: JsonMapping | None) -> None:
        evaluations.set_output_metadata(self._context("setting output_metadata"), value)

    @property
    def evaluation_receipts(self) -> list[JsonObject]:
        """The receipts of the turn's structured evaluations (attempts, usage, cost, answers)."""
        running = self._running
        if running is not None and running.row.pk == self.row.pk:
            return list(running.state.evaluations.values())
        stored = (self.row.state or {}).get("evaluations")
        return [r for r in stored.values() if isinstance(r, dict)] if isinstance(
            stored, dict) else []


__all__ = ["RunningTurn"]
