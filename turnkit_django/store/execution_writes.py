"""The writes a claim's worker makes to its turn's tool executions.

:class:`ExecutionWrites` is the part of :class:`~.fenced.Fenced` that creates a call's execution
row and moves its status by compare-and-set, stamped with the claim's fence: at once inside
``Fenced.atomic()``, buffered into the step's one statement inside ``Fenced.step()``.
"""

from __future__ import annotations

from collections.abc import Iterable

from django.db.models import F
from django.db.models.functions import Now

from ..base.states import ToolStatus
from ..exceptions import LostClaim
from ..messages import ToolCallPart
from ..models import ToolExecution
from . import steps
from .claims import Claim
from .compiled import CompiledUpdate
from .rows import new_row
from .steps import StepWrites


class ExecutionWrites:
    """A claim's writes to its tool executions (a base of :class:`~.fenced.Fenced`)."""

    claim: Claim
    #: The step's buffered writes inside a buffered ``step()``; None: write at once.
    _writes: StepWrites | None

    def open_execution(self, call: ToolCallPart, status: str, **fields: object) -> ToolExecution:
        """Create the execution row of ``call`` (the intent, or a result decided at once)."""
        execution = new_row(ToolExecution, turn_id=self.claim.turn_id, fence=self.claim.fence,
                            tool_call_id=call.id, tool_name=call.name,
                            arguments=call.arguments, status=status, **fields)
        if self._writes is not None:
            self._writes.created.append(execution)
        else:
            execution.save(force_insert=True)
        return execution

    def move_execution(self, execution_id: str, expected: Iterable[str], status: str,
                       **fields: object) -> bool:
        """Compare-and-set a tool execution's status; False if it was not in ``expected``
        (inside a step, a move that does not hold makes the step decide again under the
        lock, so it answers True)."""
        changes = {"status": status, "fence": self.claim.fence, "updated_at": Now(), **fields}
        if self._writes is not None:
            self._writes.moves.append(steps.Move(execution_id, tuple(expected), changes))
            return True
        return bool(ToolExecution.objects.filter(pk=execution_id, status__in=list(expected))
                    .update(**changes))

    def put_back(self, execution_id: str, **fields: object) -> bool:
        """A call whose intent was written but which never started goes back to ``pending``
        with its attempt undone: cancelled now, it was "not executed" (not "outcome unknown");
        started later, it counts the one attempt that ran."""
        return self.move_execution(execution_id, [ToolStatus.RUNNING], ToolStatus.PENDING,
                                   attempts=F("attempts") - 1, **fields)

    def restart_execution(self, execution_id: str, *, started: bool = True) -> bool:
        """Start a pending execution again (a replay-safe call reset by recovery, a wait);
        ``started=False``: its intent only, :meth:`start_call` records the start."""
        return self.move_execution(execution_id, [ToolStatus.PENDING, ToolStatus.RUNNING],
                                   ToolStatus.RUNNING, started_at=Now() if started else None,
                                   attempts=F("attempts") + 1)

    def start_call(self, execution_id: str) -> None:
        """Record, in one statement, that a call that is not replay-safe starts now: a call
        whose worker died before it provably never ran (recovery runs it)."""
        if not _START_CALL.execute(execution_id, self.claim.fence):
            raise LostClaim(self.claim.turn_id, self.claim.fence)


#: The start of a call, at every call that is not replay-safe: compiled once per process.
_START_CALL = CompiledUpdate(
    lambda execution_id, fence: ToolExecution.objects.filter(
        pk=execution_id, status=ToolStatus.RUNNING, fence=fence, started_at__isnull=True),
    {"started_at": Now()}, 2, ints=(1,))


__all__ = ["ExecutionWrites"]
