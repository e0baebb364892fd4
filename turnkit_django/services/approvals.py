"""Approve or deny a parked tool call, the inbox of pending approvals, and their expiry.

A call of a tool declared ``approval=True`` (or whose approval callable says so) is parked by
its turn (runtime.controls): the execution waits ``pending`` with ``approval.state ==
"requested"`` and the turn is ``paused`` with its claim released. A decision, under the tree
lock, records the approval (edited arguments re-validated first) and resumes the turn: a
background turn is dispatched, an inline one is left ``pending`` for the caller to execute
(the handles do). The next claim runs the approved call exactly once (with the arguments as
approved) or gives the model the denial as a failed tool result.

The call is named by its execution id, or by the model's tool call id, which is unique per
turn only: one naming the requests of several turns of the tree is refused (:func:`find`).
Deciding again the same way is a no-op; deciding otherwise raises ApprovalError, and so does
deciding a call whose turn ended before it ran (cancelling the turn closes the request as
``cancelled``, see store.transcript.repair). Maintenance denies requests whose
``approval_timeout`` passed (:func:`expire_approvals`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..agents import get_agent
from ..base.serialization import JsonObject, json_value, unstorable
from ..conf import turnkit_settings
from ..events import emit
from ..exceptions import ApprovalError, ConfigurationError, InputError
from ..models import ToolExecution, Turn
from ..runtime.authorization import authorize, is_allowed
from ..runtime.calls import turn_tools
from ..runtime.submission import dispatch
from ..store import AlreadyDecided, TurnState, database_now, decide_approval
from ..store.events import stamp
from ..store.input_checks import optional_text
from ..store.interventions import awaiting_approval


class UnknownCall(ApprovalError):
    """The call id names no tool call of the run (or turn)."""


@dataclass(frozen=True)
class Decision:
    """What a decision did: the execution as decided, and whether the caller must execute the
    (inline) turn now."""

    execution: ToolExecution
    changed: bool
    execute_inline: bool
    #: The turn to execute (inline): the decided call's, or the top of the inline parents
    #: parked on it, which runs its sub-agent on inside its own step.
    continue_id: str | None = None


def find(root_id: str, call_id: str, *, turn_id: str | None = None,
         may_see: Callable[[ToolExecution], bool] = lambda execution: True) -> ToolExecution:
    """The tool execution ``call_id`` names in the tree (or only in ``turn_id``).

    An execution id names its execution. A tool call id is the model's and only unique per
    turn (local servers send ``call_0`` in every response), so when it names the approval
    requests of more than one turn of the tree, this raises ApprovalError naming the
    candidates instead of picking one: a decision must land on the call the person reviewed.
    The refusal names only the candidates ``may_see`` allows (the caller's own); when it
    allows none, the first is returned for the caller's authorization to refuse.
    """
    scope = ToolExecution.objects.select_related("turn").filter(turn__root_turn_id=root_id)
    if turn_id is not None:
        scope = scope.filter(turn_id=turn_id)
    found = scope.filter(pk=call_id).first()
    if found is not None:
        return found
    matches = list(scope.filter(tool_call_id=call_id).order_by("created_at", "id"))
    asked = [m for m in matches if m.approval is not None]
    if len(asked) > 1:
        visible = [m for m in asked if may_see(m)]
        if not visible:
            return asked[0]
        raise ApprovalError(_ambiguous(call_id, root_id, visible))
    if asked or matches:
        return (asked or matches)[-1]
    where = f"turn {turn_id!r}" if turn_id is not None else f"run {root_id!r}"
    raise UnknownCall(f"no tool call {call_id!r} in {where}; pass the execution id an "
                        "approval.requested event (execution_id) or pending_approvals() (.id) "
                        "gave")


def _ambiguous(call_id: str, root_id: str, candidates: list[ToolExecution]) -> str:
    """The refusal of an ambiguous call id: the candidates by id and state, no arguments."""
    named = "; ".join(f"execution {c.pk!r} of turn {c.turn_id!r} "
                      f"({(c.approval or {}).get('state')})" for c in candidates)
    return (f"tool call id {call_id!r} names more than one approval request in run "
            f"{root_id!r}: {named}. Nothing was decided; pass the execution id instead (the "
            "approval.requested event's execution_id, or .id of a pending_approvals() entry), "
            "or decide through the handle of the turn (load_turn(turn_id).approve(call_id))")


def _resources(execution: ToolExecution, arguments: Any = None) -> dict[str, Any]:
    """What the authorization policy is told about deciding ``execution`` (with ``arguments``
    when a decision edits them)."""
    turn = execution.turn
    return {"turn_id": turn.pk, "conversation_id": turn.conversation_id,
            "turn_principal": turn.principal, "tool": execution.tool_name,
            "call_id": execution.tool_call_id,
            "arguments": execution.arguments if arguments is None else arguments}


def _validated(execution: ToolExecution, arguments: object) -> JsonObject:
    """The edited ``arguments`` as the tool will be called with them: validated by its
    ``Args``, then as JSON (``"7"`` for an int is stored as ``7``), so the stored record is
    what runs. Text no database stores as given (a NUL, a lone surrogate) is InputError: stored,
    it would become U+FFFD, which nobody approved."""
    arguments = json_value(arguments, "arguments")
    if not isinstance(arguments, dict):
        raise InputError(f"edited arguments for {execution.tool_name!r} must be a dict")
    problem = unstorable(arguments)
    if problem is not None:
        raise InputError(f"the edited arguments for {execution.tool_name!r} {problem}")
    turn = execution.turn
    tool = turn_tools(get_agent(turn.agent_name), turn.pk,
                      TurnState.from_json(turn.state).listed_tools).get(execution.tool_name)
    if tool is None:
        raise ConfigurationError(f"tool {execution.tool_name!r} is not a tool of agent "
                                 f"{turn.agent_name!r} any more; register the agent with it")
    try:
        validated = tool.validate(arguments)
    except ValidationError as exc:
        raise InputError(
            f"the edited arguments for {execution.tool_name!r} are invalid; fix them and "
            "approve again",
            errors=[dict(e) for e in exc.errors(include_url=False, include_input=False)],
        ) from exc
    dumped: JsonObject = validated.model_dump(mode="json", by_alias=True)
    return dumped


def decide(root_id: str, call_id: str, state: str, *, principal: Any, reason: str = "",
           arguments: Any = None, system: bool = False, turn_id: str | None = None) -> Decision:
    """Approve (``state="approved"``) or deny a parked call (``call_id``: an execution id or
    a tool call id, see :func:`find`; ``turn_id`` limits it to one turn of the tree); see the
    module docstring."""
    reason = optional_text(reason, "the reason of a decision") or ""
    action = "approve" if state == "approved" else "deny"
    try:
        execution = find(root_id, call_id, turn_id=turn_id, may_see=lambda candidate: system or
                         is_allowed(action, principal=principal, **_resources(candidate)))
    except UnknownCall:
        # Asked about the turn it was looked for in, so a principal refused there cannot
        # learn which calls another principal's run made (or did not make).
        turn = Turn.objects.filter(pk=turn_id or root_id).first()
        if not system and turn is not None:
            authorize(action, principal=principal, turn_id=turn.pk,
                      conversation_id=turn.conversation_id, turn_principal=turn.principal,
                      tool=None, call_id=call_id, arguments=None)
        raise
    row = execution.turn
    if not system:
        authorize(action, principal=principal, **_resources(execution, arguments))
    edited = None if arguments is None else _validated(execution, arguments)
    outcome = decide_approval(execution, state, principal=principal, reason=reason,
                              edited=edited, system=system)
    if isinstance(outcome, AlreadyDecided):
        return Decision(outcome.execution, False, False)  # decided this way already
    execution, row = outcome.execution, outcome.turn
    if outcome.dispatch:
        dispatch(row.pk)
    emit(f"approval.{state}", turn_id=row.pk, conversation_id=row.conversation_id,
         id=execution.tool_call_id, name=execution.tool_name, tool_execution_id=execution.pk)
    return Decision(execution, True, outcome.resumed and not outcome.dispatch, outcome.top_id)


#: Requests one inbox call reads and asks the policy about, per call it may list (``limit``, or
#: ``MAINTENANCE_BATCH_SIZE`` without one), unless ``scan=`` says otherwise.
SCAN_PER_CALL = 10


def pending_approvals(*, principal: Any = None, limit: int | None = None,
                      root_id: str | None = None, turn_id: str | None = None,
                      scan: int | None = None) -> list[ToolExecution]:
    """Tool calls waiting for a decision, oldest first, that ``principal`` may approve (in the
    tree of ``root_id``, or of the turn ``turn_id``, if given): at most ``limit``.

    The scope is a filter of the query, so requests of other runs never crowd out a run's. The
    policy is a Python callable, so the principal is not: the oldest requests of the scope are
    asked about one by one until ``limit`` are allowed or ``scan`` were asked about (by default
    ten per call the answer may hold), so one inbox view costs a bounded number of policy calls
    however many requests other principals have waiting."""
    if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
        raise InputError(f"pending_approvals(): limit= must be None or an int >= 1, got "
                         f"{limit!r:.40}")
    if scan is not None and (isinstance(scan, bool) or not isinstance(scan, int) or scan < 1):
        raise InputError(f"pending_approvals(): scan= (the most requests asked about) must be "
                         f"None or an int >= 1, got {scan!r:.40}")
    root_id = optional_text(root_id, "pending_approvals(): root_id= (a run's turn id)")
    turn_id = optional_text(turn_id, "pending_approvals(): turn_id= (a turn id)")
    size = limit or int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    budget = scan if scan is not None else SCAN_PER_CALL * size
    scope = ToolExecution.objects.awaiting_approval().select_related("turn")
    if root_id is not None:
        scope = scope.filter(turn__root_turn_id=root_id)
    if turn_id is not None:
        scope = scope.filter(turn_id=turn_id)
    scope = scope.order_by("created_at", "id")
    allowed: list[ToolExecution] = []
    start = 0
    while len(allowed) < size and start < budget:
        stop = min(start + size, budget)
        page = list(scope[start:stop])
        for row in page:
            if is_allowed("approve", principal=principal, **_resources(row)):
                allowed.append(row)
                if len(allowed) == size:
                    break
        if len(page) < stop - start:
            break
        start = stop
    return allowed


def expire_approvals() -> list[str]:
    """Deny the approval requests whose time passed (maintenance); return their executions.

    A background turn resumes and its model reads the denial; an inline turn stays ``pending``
    until the application executes it (``run.execute()`` or ``run.resume()``).
    """
    batch = int(turnkit_settings.MAINTENANCE_BATCH_SIZE)
    expired = list(ToolExecution.objects.approval_expired(stamp(database_now())).select_related(
        "turn").order_by("created_at")[:batch])
    done: list[str] = []
    for execution in expired:
        try:
            decide(execution.turn.root_turn_id, execution.pk, "expired", principal=None,
                   reason="the approval request expired", system=True)
        except ApprovalError:
            continue  # decided meanwhile
        done.append(execution.pk)
    return done


def awaiting(turn_ids: list[str]) -> set[str]:
    """The turns among ``turn_ids`` with a call waiting for approval."""
    return awaiting_approval(turn_ids)


__all__ = ["Decision", "UnknownCall", "awaiting", "decide", "expire_approvals", "find",
           "pending_approvals"]
