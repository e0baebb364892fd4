"""Budget completion: the one final save a response that exhausted the spend limit may make.

A tool declared ``budget_completion=True`` (it must be terminal and replay-safe) is a final save.
When the response whose charge reaches or passes ``max_spend`` holds exactly one call to such a
tool, that call's id is recorded in the turn's state by the response's own transaction. Then:

* only that call runs; every other call of the response, before or after it, gets a
  "not executed: spend limit reached" result (:func:`skip_reason` is the one rule: it wins over
  "the turn ended with ..." for the calls after the save);
* its start skips the spend check alone: the deadline, the tool-count limits, authorization,
  the tool policy, argument validation and fencing all still apply;
* no further model request is made (no next step, no summary, no policy judge, no evaluation);
  an output policy that finds violations fails the turn instead of asking for a revision.

With no eligible call, or several, nothing runs and the turn fails with the spend limit, as for
any response that exhausts it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

from ..messages import ToolCallPart
from ..store import Ledger, Terminal
from .budget import limits_of
from .context import TurnContext

#: The reason of the "not executed" results of the calls the final save leaves out.
SPEND_REACHED = "spend limit reached"


def exhausted(ledger: Ledger) -> bool:
    """Whether the tree's observed spend reached its limit (equal counts as reached)."""
    limit = limits_of(ledger).max_spend
    return limit is not None and ledger.spend >= limit


def choose(ctx: TurnContext, ledger: Ledger, calls: Sequence[ToolCallPart]) -> str | None:
    """The call id of the response's final save, if the response exhausted the spend limit
    and holds exactly one call to a budget-completion tool; call under the tree lock after
    charging the response."""
    if not calls or not exhausted(ledger):
        return None
    eligible = [c for c in calls if c.duplicate_of is None
                and getattr(ctx.tools.get(c.name), "budget_completion", False)]
    return eligible[0].id if len(eligible) == 1 else None


def exempt(ctx: TurnContext, call: ToolCallPart) -> bool:
    """Whether ``call`` is the turn's final save (its start skips the spend check)."""
    return ctx.state.budget_completion_call_id == call.id


def left_out(ctx: TurnContext, call: ToolCallPart) -> bool:
    """Whether ``call`` is another call of a response that made a final save."""
    chosen = ctx.state.budget_completion_call_id
    return chosen is not None and chosen != call.id


@overload
def skip_reason(ctx: TurnContext, call: ToolCallPart, terminal: Terminal) -> str: ...
@overload
def skip_reason(ctx: TurnContext, call: ToolCallPart, terminal: None) -> str | None: ...
def skip_reason(ctx: TurnContext, call: ToolCallPart, terminal: Terminal | None) -> str | None:
    """Why ``call`` gets a "not executed" result instead of running, or None if it may run.

    A call a final save leaves out gets the spend limit, whatever its place relative to the
    save; any other call after a terminal tool gets the tool that ended the turn.
    """
    if left_out(ctx, call):
        return SPEND_REACHED
    if terminal is not None:
        return f"the turn ended with {terminal.tool!r}"
    return None


__all__ = ["SPEND_REACHED", "choose", "exempt", "exhausted", "left_out", "skip_reason"]
