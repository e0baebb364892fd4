"""The invariant checker: prove that stored data keeps invariants I1-I4, I6, I7 (docs: testing).

Run it on quiescent data (after a test, after a chaos scenario, from ``manage.py turnkit_verify``):
it reads rows in several queries, so a worker writing at the same moment can make it report a
state that was only momentarily inconsistent. It reads one chunk of conversations at a time (their
turns, tool executions and deliveries in one query each) and one conversation's messages at a time,
so memory stays bounded whatever the size of the history.

Fences: a claim increments ``Turn.fence`` and its writes carry the fence it got; every end of a
claim increments it again (completion and failure in the same transaction as the terminal status,
revocation by reconcile, stale or cancel through :func:`turnkit_django.store.revoke`, which also
appends ``{fence, revoked_after_sequence, reason, at}`` to ``Turn.fence_log``). Hence:

I1 - one terminal state, no owned writes after it
    * a terminal turn (completed, failed, cancelled, stale) has ``completed_at``, no claim
      (``claimed_by`` empty) and no pending or running tool execution; a failed, cancelled or stale
      turn has an ``error`` record; a completed turn's phase is ``done``;
    * a non-terminal turn has no ``completed_at`` and is not in phase ``done``;
    * the terminal transition increments the fence, and nobody can claim a terminal turn, so its
      final fence is never held by any worker: a message or tool execution of a terminal turn
      carrying ``fence == Turn.fence`` was written after the turn ended.
I2 - each accepted input appears once
    * in a conversation, at most one user message carries a given ``metadata["delivery_id"]``
      (the :class:`~turnkit_django.models.Delivery` id) or ``metadata["input_key"]``;
    * a delivery has a message exactly when it has ``delivered_at``, that message is in its
      destination conversation, and no other message there claims the delivery.
I3 - transcripts are valid
    * a conversation's sequences are exactly 1..``Conversation.last_sequence``;
    * per turn, in sequence order: each tool call id appears in one assistant message only; each
      call gets exactly one tool result, from a tool message of the same turn, before the turn's
      next assistant message; a result always answers a call of the turn. The last batch may be
      open only while the turn is not terminal and in phase ``tools`` (running, waiting, or
      pending after a recovery);
    * tool executions are unique per (turn, call id) and belong to a call of the turn; a finished
      execution has its result message, an unfinished one has none, and a result message points
      at its call's execution.
I4 - no write by a revoked fence
    * no message or tool execution carries a fence greater than its turn's fence;
    * for each ``fence_log`` entry, no message of the turn carrying the revoked fence has a
      sequence greater than ``revoked_after_sequence``; logged fences increase and stay below
      the turn's fence;
    * within a turn's transcript the fences of its messages never decrease.

Application writes (user input, repairs made by reconcile) carry no fence; fence checks skip them.

I6 (cascade cancels reach every descendant) and I7 (acyclic wait graph, no forgotten waiter) are
checked by :mod:`turnkit_django.verify_graph` from the active turns.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Iterable, Iterator
from itertools import islice
from typing import TypeVar

from django.db.models import Q, QuerySet

from ..base.states import FINISHED_TOOL_STATUSES, Phase, TurnStatus
from ..messages import MEDIA_KINDS
from ..models import Conversation, Delivery, Message, ToolExecution, Turn
from .report import Report, Violation
from .snapshots import DeliveryRow, ExecutionRow, MessageRow, TurnRow
from .verify_graph import check_graph

#: Each invariant the checker proves, in one line (``turnkit_verify --help`` lists them).
INVARIANTS = {
    "I1": "one terminal state: a finished turn has completed_at, an error unless it completed, "
          "no later write",
    "I2": "each accepted input appears once: one message per delivery or input key",
    "I3": "transcripts are valid: sequences without gaps, every tool call answered once, "
          "in order",
    "I4": "no write by a revoked fence: a worker whose claim was taken away wrote nothing after",
    "I6": "a cascade cancel reaches every descendant: no active turn under a cancelled tree",
    "I7": "the wait graph is acyclic and waiters are released: no deadlock, no forgotten waiter",
}
INPUT_KEYS = ("delivery_id", "input_key")
CHUNK_SIZE = 200

_FINISHED = frozenset(str(s) for s in FINISHED_TOOL_STATUSES)
_Item = TypeVar("_Item")
_NEEDS_ERROR = frozenset({TurnStatus.FAILED, TurnStatus.CANCELLED, TurnStatus.STALE})


def _chunks(items: Iterable[_Item], size: int) -> Iterator[list[_Item]]:
    iterator = iter(items)
    while chunk := list(islice(iterator, size)):
        yield chunk


def _conversations(turn_ids: Iterable[str] | None,
                   conversation_ids: Iterable[str] | None) -> QuerySet[Conversation]:
    queryset = Conversation.objects.order_by("pk")
    if turn_ids is None and conversation_ids is None:
        return queryset
    holding = Turn.objects.filter(pk__in=list(turn_ids or ())).values("conversation_id")
    return queryset.filter(Q(pk__in=list(conversation_ids or ())) | Q(pk__in=holding))


class _Checker:
    """Checks one chunk of conversations at a time, adding violations to a report."""

    def __init__(self, report: Report) -> None:
        self.report = report
        self.add = report.add

    # -- loading ---------------------------------------------------------------------

    def check_chunk(self, conversations: list[tuple[str, int]]) -> None:
        ids = [pk for pk, _ in conversations]
        turns = {row["id"]: TurnRow(**row) for row in
                 Turn.objects.filter(conversation_id__in=ids).values(*TurnRow.FIELDS)}
        turns_of: dict[str, list[TurnRow]] = defaultdict(list)
        for turn in turns.values():
            turns_of[turn.conversation_id].append(turn)
        executions: dict[str, list[ExecutionRow]] = defaultdict(list)
        for row in ToolExecution.objects.filter(turn__conversation_id__in=ids).values(
                *ExecutionRow.FIELDS):
            executions[row["turn_id"]].append(ExecutionRow(**row))
        deliveries: dict[str, list[DeliveryRow]] = defaultdict(list)
        for row in Delivery.objects.filter(destination_conversation_id__in=ids).values(
                *DeliveryRow.FIELDS):
            deliveries[row["destination_conversation_id"]].append(DeliveryRow(**row))
        for conversation_id, last_sequence in conversations:
            messages = [MessageRow(**row) for row in
                        Message.objects.filter(conversation_id=conversation_id)
                        .order_by("sequence").values(*MessageRow.FIELDS)]
            self._load_owners(messages, turns)
            self.check_sequences(conversation_id, last_sequence, messages)
            self.check_inputs(messages, deliveries[conversation_id])
            self.check_fences(messages, turns)
            owned: dict[str | None, list[MessageRow]] = defaultdict(list)
            for message in messages:
                owned[message.turn_id].append(message)
            for turn in turns_of[conversation_id]:
                self.check_terminal(turn, executions[turn.id])
                self.check_revocations(turn, owned[turn.id])
                self.check_tool_calls(turn, owned[turn.id], executions[turn.id])
            self.report.conversations += 1
            self.report.turns += len(turns_of[conversation_id])

    @staticmethod
    def _load_owners(messages: list[MessageRow], turns: dict[str, TurnRow]) -> None:
        """Load the turns of other conversations that own messages here (rare)."""
        missing = {m.turn_id for m in messages if m.turn_id and m.turn_id not in turns}
        for row in Turn.objects.filter(pk__in=missing).values(*TurnRow.FIELDS):
            turns[row["id"]] = TurnRow(**row)

    # -- I1 --------------------------------------------------------------------------

    def check_terminal(self, turn: TurnRow, executions: list[ExecutionRow]) -> None:
        if not turn.terminal:
            if turn.completed_at is not None:
                self.add("I1", turn.id, f"turn is {turn.status} but has completed_at")
            if turn.phase == Phase.DONE:
                self.add("I1", turn.id, f"turn is {turn.status} but its phase is done")
            return
        if turn.completed_at is None:
            self.add("I1", turn.id, f"terminal turn ({turn.status}) has no completed_at")
        if turn.claimed_by:
            self.add("I1", turn.id,
                     f"terminal turn ({turn.status}) is still claimed by {turn.claimed_by!r}")
        if turn.status in _NEEDS_ERROR and not turn.error:
            self.add("I1", turn.id, f"{turn.status} turn has no error record")
        if turn.status == TurnStatus.COMPLETED and turn.phase != Phase.DONE:
            self.add("I1", turn.id, f"completed turn is in phase {turn.phase!r}, not done")
        for execution in executions:
            if execution.status not in _FINISHED:
                self.add("I1", execution.id, f"tool execution of {turn.status} turn {turn.id!r} "
                                             f"is still {execution.status}")

    def check_owned_fence(self, turn: TurnRow, object_id: str, fence: int | None,
                          what: str) -> None:
        """Check one owned write's fence against its turn's current fence (I1, I4)."""
        if fence is None:
            return
        if fence > turn.fence:
            self.add("I4", object_id, f"{what} carries fence {fence}, above the fence "
                                      f"{turn.fence} of turn {turn.id!r}")
        elif fence == turn.fence and turn.terminal:
            self.add("I1", object_id, f"{what} was written after turn {turn.id!r} ended "
                                      f"({turn.status}): it carries the final fence {fence}")

    # -- I2 --------------------------------------------------------------------------

    def check_inputs(self, messages: list[MessageRow], deliveries: list[DeliveryRow]) -> None:
        seen: dict[tuple[str, str], MessageRow] = {}
        claims: dict[str, list[MessageRow]] = defaultdict(list)
        for message in messages:
            metadata = message.metadata if isinstance(message.metadata, dict) else {}
            if message.role != "user":
                continue
            for key in INPUT_KEYS:
                value = metadata.get(key)
                if value is None:
                    continue
                first = seen.setdefault((key, str(value)), message)
                if first is not message:
                    self.add("I2", message.id, f"input {key}={value!r} appears twice in "
                                               f"conversation {message.conversation_id!r}: "
                                               f"#{first.sequence} and #{message.sequence}")
            if metadata.get("delivery_id") is not None:
                claims[str(metadata["delivery_id"])].append(message)
        here = {m.id for m in messages}
        for delivery in deliveries:
            pk, message_id = delivery.id, delivery.message_id
            if delivery.delivered_at is None:
                if message_id is not None:
                    self.add("I2", pk, f"delivery has message {message_id!r} but no delivered_at")
                continue
            if message_id is None:
                self.add("I2", pk, "delivered delivery has no message")
            elif message_id not in here:
                self.add("I2", pk, f"message {message_id!r} of the delivery is not in its "
                                   "destination conversation")
            for other in claims.get(pk, ()):
                if other.id != message_id:
                    self.add("I2", other.id, f"message #{other.sequence} claims delivery {pk!r}, "
                                             f"which recorded message {message_id!r}")

    # -- I3 --------------------------------------------------------------------------

    def check_sequences(self, conversation_id: str, last_sequence: int,
                        messages: list[MessageRow]) -> None:
        previous = 0
        for message in messages:
            if message.sequence == previous:
                self.add("I3", message.id, f"sequence {previous} is used twice in conversation "
                                           f"{conversation_id!r}")
            elif message.sequence != previous + 1:
                self.add("I3", conversation_id, f"sequences {previous + 1}..{message.sequence - 1}"
                                                " are missing")
            previous = message.sequence
        if previous != last_sequence:
            self.add("I3", conversation_id, f"last_sequence is {last_sequence} but the last "
                                            f"message has sequence {previous}")

    def check_tool_calls(self, turn: TurnRow, owned: list[MessageRow],
                         executions: list[ExecutionRow]) -> None:
        called: dict[str, MessageRow] = {}
        results: dict[str, list[MessageRow]] = defaultdict(list)
        open_calls: dict[str, MessageRow] = {}
        for message in owned:
            # Images and analyses a tool records during its call sit between call and result.
            if message.role == "assistant" and message.kind not in MEDIA_KINDS:
                self._close(turn, open_calls, f"before assistant message #{message.sequence}")
                open_calls = {}
                for call_id in message.calls:
                    if call_id in called:
                        self.add("I3", message.id, f"tool call id {call_id!r} is reused in "
                                                   f"turn {turn.id!r}")
                    called[call_id] = open_calls[call_id] = message
            for call_id in message.results:
                results[call_id].append(message)
                self._check_result(turn, message, call_id, called, results, open_calls)
        if open_calls and (turn.terminal or turn.phase != Phase.TOOLS):
            self._close(turn, open_calls, f"and turn is {turn.status} in phase {turn.phase!r}")
        self._check_executions(turn, executions, called, results)

    def _close(self, turn: TurnRow, open_calls: dict[str, MessageRow], where: str) -> None:
        for call_id, message in open_calls.items():
            self.add("I3", message.id, f"tool call {call_id!r} of turn {turn.id!r} has no "
                                       f"result {where}")

    def _check_result(self, turn: TurnRow, message: MessageRow, call_id: str,
                      called: dict[str, MessageRow], results: dict[str, list[MessageRow]],
                      open_calls: dict[str, MessageRow]) -> None:
        if message.role != "tool":
            self.add("I3", message.id, f"tool result for {call_id!r} is in a {message.role} "
                                       "message")
        if call_id not in called:
            self.add("I3", message.id, f"tool result for {call_id!r} answers no call of turn "
                                       f"{turn.id!r}")
        elif len(results[call_id]) > 1:
            self.add("I3", message.id, f"tool call {call_id!r} has a second result "
                                       f"(#{results[call_id][0].sequence} and "
                                       f"#{message.sequence})")
        elif call_id not in open_calls:
            self.add("I3", message.id, f"tool result for {call_id!r} comes after the next "
                                       "assistant message")
        else:
            del open_calls[call_id]

    def _check_executions(self, turn: TurnRow, executions: list[ExecutionRow],
                          called: dict[str, MessageRow],
                          results: dict[str, list[MessageRow]]) -> None:
        counts = Counter(e.tool_call_id for e in executions)
        for execution in executions:
            call_id = execution.tool_call_id
            self.check_owned_fence(turn, execution.id, execution.fence, "tool execution")
            if counts[call_id] > 1:
                self.add("I3", execution.id, f"tool call {call_id!r} has {counts[call_id]} "
                                             "executions")
            if call_id not in called:
                self.add("I3", execution.id, f"tool execution for {call_id!r} answers no call "
                                             f"of turn {turn.id!r}")
            answered = results.get(call_id, [])
            if execution.status in _FINISHED and not answered:
                self.add("I3", execution.id, f"{execution.status} tool execution for {call_id!r}"
                                             " has no result message")
            elif execution.status not in _FINISHED and answered:
                self.add("I3", execution.id, f"tool execution for {call_id!r} is still "
                                             f"{execution.status} but has a result message")
            for message in answered:
                if message.tool_execution_id not in (None, execution.id) and counts[call_id] == 1:
                    self.add("I3", message.id, f"result for {call_id!r} points at tool execution"
                                               f" {message.tool_execution_id!r}, not "
                                               f"{execution.id!r}")

    # -- I4 --------------------------------------------------------------------------

    def check_fences(self, messages: list[MessageRow], turns: dict[str, TurnRow]) -> None:
        last_fence: dict[str, MessageRow] = {}
        for message in messages:
            if message.turn_id is None or message.fence is None:
                continue
            turn = turns.get(message.turn_id)
            if turn is None:
                continue
            self.check_owned_fence(turn, message.id, message.fence,
                                   f"message #{message.sequence}")
            before = last_fence.get(turn.id)
            if before is not None and before.fence is not None and message.fence < before.fence:
                self.add("I4", message.id, f"message #{message.sequence} carries fence "
                                           f"{message.fence}, after #{before.sequence} with fence "
                                           f"{before.fence}")
            last_fence[turn.id] = message

    def check_revocations(self, turn: TurnRow, owned: list[MessageRow]) -> None:
        previous = -1
        for entry in turn.revocations():
            fence, after = entry.get("fence"), entry.get("revoked_after_sequence")
            if not isinstance(fence, int):
                self.add("I4", turn.id, f"fence log entry without a fence: {entry!r}")
                continue
            if not previous < fence < turn.fence:
                self.add("I4", turn.id, f"fence log entry for fence {fence} is out of order "
                                        f"(previous {previous}, turn fence {turn.fence})")
            previous = fence
            if not isinstance(after, int):
                continue
            for message in owned:
                if message.fence == fence and message.sequence > after:
                    self.add("I4", message.id, f"message #{message.sequence} was written by "
                                               f"fence {fence} of turn {turn.id!r}, revoked "
                                               f"after #{after} ({entry.get('reason')})")


def verify(*, turn_ids: Iterable[str] | None = None,
           conversation_ids: Iterable[str] | None = None,
           chunk_size: int = CHUNK_SIZE) -> Report:
    """Check I1-I4, I6, I7 and return a report with counts; filters select conversations.

    Without filters every conversation is checked. ``turn_ids`` selects the conversations that
    hold those turns and ``conversation_ids`` selects conversations; both may be given.
    """
    report = Report()
    checker = _Checker(report)
    selection = _conversations(None if turn_ids is None else list(turn_ids),
                               None if conversation_ids is None else list(conversation_ids))
    rows = selection.values_list("pk", "last_sequence")
    for chunk in _chunks(rows.iterator(chunk_size=chunk_size), chunk_size):
        checker.check_chunk(chunk)
    selected = None if turn_ids is None and conversation_ids is None else selection.values("pk")
    check_graph(report, selected)
    return report


def check_invariants(*, turn_ids: Iterable[str] | None = None,
                     conversation_ids: Iterable[str] | None = None) -> list[Violation]:
    """Return every violation in the selected conversations (all by default)."""
    return verify(turn_ids=turn_ids, conversation_ids=conversation_ids).violations


def assert_invariants(*, turn_ids: Iterable[str] | None = None,
                      conversation_ids: Iterable[str] | None = None) -> None:
    """Raise AssertionError listing every violation in the selected conversations."""
    violations = check_invariants(turn_ids=turn_ids, conversation_ids=conversation_ids)
    if violations:
        lines = "\n".join(f"  {v}" for v in violations)
        raise AssertionError(f"{len(violations)} invariant violation(s):\n{lines}")


__all__ = ["Report", "Violation", "assert_invariants", "check_invariants", "verify"]
