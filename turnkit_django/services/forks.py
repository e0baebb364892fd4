"""Fork a conversation (``conv.fork(at=...)``) and retry a run (``run.retry()``).

A fork is a new conversation holding copies of the history up to a message; the original is
not touched, and a fork may be taken while a turn of the original runs (it copies committed
messages only). The point must close every tool exchange: a model's tool call without its
result would be a transcript no provider takes. A retry is a new run of the same input: a fork
of the run's conversation up to its input (what the failed run saw), with a new root turn of
the same agent and options, linked to the original by ``retry_of``.
"""

from __future__ import annotations

from collections.abc import Iterable

from ..agents import AgentDefinition
from ..base.serialization import JsonValue, json_value
from ..base.states import TurnStatus
from ..exceptions import InputError, InvalidTransition
from ..messages import load_parts
from ..models import Conversation, Message, Turn
from ..runtime import execute, refuse_atomic_block
from ..runtime.authorization import authorize
from ..runtime.creation import new_turn
from ..store import reload
from ..store.forks import fork_conversation, retry_copy

#: What ``principal=`` is when the caller gave none: a trusted application, nothing asked.
UNSET: object = object()
#: A run ended without its result: it may run again.
RETRYABLE = frozenset({TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.STALE})


def closed_points(rows: Iterable[tuple[int, object]]) -> list[int]:
    """The sequences, of ``(sequence, content)`` rows in order, after which no tool call is
    waiting for its result."""
    open_calls: set[str] = set()
    points = []
    for sequence, content in rows:
        for part in load_parts(content):
            if part.kind == "tool_call":
                open_calls.add(part.id)
            elif part.kind == "tool_result":
                open_calls.discard(part.tool_call_id)
        if not open_calls:
            points.append(sequence)
    return points


def _ranges(points: list[int]) -> str:
    spans: list[list[int]] = []
    for point in points:
        if spans and spans[-1][1] == point - 1:
            spans[-1][1] = point
        else:
            spans.append([point, point])
    return ", ".join(str(a) if a == b else f"{a}-{b}" for a, b in spans) or "none"


def _principal(conversation: Conversation, principal: object) -> JsonValue:
    """The owner of the copy: ``principal`` once it may read ``conversation``, else (none
    given) the original's owner."""
    if principal is UNSET:
        return conversation.principal
    checked = json_value(principal, "principal")
    authorize("read_messages", principal=checked, conversation_id=conversation.pk,
              conversation_principal=conversation.principal)
    return checked if checked is not None else conversation.principal


def history_upto(conversation: Conversation, at: object, what: str) -> list[Message]:
    """The messages 1..``at`` of ``conversation``; InputError naming the valid points when
    ``at`` is no message's sequence or falls inside a tool exchange."""
    if type(at) is not int:
        raise InputError(f"{what}: at= must be a message's sequence (an int), not {at!r}")
    history = list(Message.objects.filter(conversation_id=conversation.pk,
                                          sequence__lte=at).order_by("sequence"))
    rows = [(m.sequence, m.content) for m in history]
    if not history or history[-1].sequence != at or closed_points(rows)[-1:] != [at]:
        every = Message.objects.filter(conversation_id=conversation.pk).order_by("sequence")
        points = closed_points(every.values_list("sequence", "content"))
        problem = ("is inside a tool exchange (a tool call without its result)"
                   if history and history[-1].sequence == at else "is no message's sequence")
        raise InputError(f"{what}: at={at} {problem} in conversation {conversation.pk!r}; the "
                         f"sequences it can fork at are: {_ranges(points)}")
    return history


def fork(conversation: Conversation, at: object, *, principal: object = UNSET) -> Conversation:
    """A new conversation with copies of ``conversation``'s messages 1..``at``; with
    ``principal=``, authorized as reading the original (``read_messages``) and owned by it."""
    owner = _principal(conversation, principal)
    return fork_conversation(conversation, history_upto(conversation, at, "conv.fork()"),
                             principal=owner)


def retry(turn: Turn, agent: AgentDefinition, *, principal: object = UNSET,
          submit: bool | None = None) -> Turn:
    """Run the failed, cancelled or stale run ``turn`` again as a new run of the same input.

    ``submit=None`` does what the original did: a background run is submitted, an inline
    one runs now, in this process. Returns the new run's root turn."""
    reload(turn)
    if not turn.is_root:
        raise InputError(f"run.retry(): turn {turn.pk!r} is a sub-agent's turn of run "
                         f"{turn.root_turn_id!r}; retry that run")
    if turn.status not in RETRYABLE:
        error = InvalidTransition(turn.pk, turn.status, "retry")
        error.args = (f"{error}; only a failed, cancelled or stale (timed out) run can be "
                      "retried (a run still active can be cancelled first)",)
        raise error
    if submit is not None and type(submit) is not bool:
        raise InputError(f"run.retry(): submit= must be True, False or None, not {submit!r}")
    background = turn.submitted_at is not None if submit is None else submit
    if not background:
        refuse_atomic_block("run.retry() of an inline run")
    source = Conversation.objects.get(pk=turn.conversation_id)
    owner = _principal(source, principal)
    options = turn.options or {}
    row = retry_copy(
        source, turn, lambda: history_upto(source, turn.context_sequence, "run.retry()"),
        principal=owner, create=lambda copy: new_turn(
            agent, conversation=copy, submit=background, principal=owner, model=turn.model,
            context=options.get("context"), output_schema=options.get("output_schema"),
            thinking=options.get("thinking"), prompt_mode=options.get("prompt_mode"),
            compaction=options.get("compaction")))
    if not background:
        execute(row.pk, agent=agent, root_id=row.pk)
    return reload(row)


__all__ = ["RETRYABLE", "UNSET", "closed_points", "fork", "history_upto", "retry"]
