"""A turn's tree and transcript as data, for the admin, ``turnkit_inspect`` and text transcripts.

:func:`load_tree` reads a whole tree in one query; :func:`turn_transcript` and
:func:`conversation_transcript` add two more (the messages of the conversations involved and
their tool executions), whatever the size of the tree, and nest each sub-agent's transcript
under the tool call that started it. Nothing here writes.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal

from django.db.models import Q

from .. import messages as m
from ..base.serialization import JsonObject, JsonValue, decimal_json, decimal_text
from ..base.states import ACTIVE_TURN_STATUSES, ToolStatus
from ..clients.protocol import Usage
from ..messages import ImagePart, MediaAnalysisPart, Part, ToolResultPart, load_parts
from ..models import Conversation, Message, ToolExecution, Turn
from .formatting import format_cost, pretty_json, ran_seconds
from .timeline_media import TranscriptItem, media_item

#: How a tool result reads: the tool ran and answered, it failed, it was interrupted mid-call
#: (it may or may not have taken effect), or it never ran.
OK, ERROR, OUTCOME_UNKNOWN, NOT_EXECUTED = "ok", "error", "outcome_unknown", "not_executed"


def _iso(value: datetime | None) -> str | None:
    return None if value is None else value.isoformat()


@dataclass(frozen=True)
class Totals:
    """Usage and cost summed over some turns; ``cost`` is None when any cost is unknown."""

    turns: int
    usage: Usage
    cost: Decimal | None

    @classmethod
    def of(cls, turns: Iterable[Turn]) -> Totals:
        rows = list(turns)
        usage = sum((Usage.from_dict(t.usage) for t in rows), Usage())
        unknown = any(t.cost_unknown for t in rows)
        cost = None if unknown else sum((t.cost for t in rows), Decimal(0))
        return cls(len(rows), usage, cost)

    @property
    def cost_text(self) -> str:
        return format_cost(self.cost)

    def as_json(self) -> JsonObject:
        return {"turns": self.turns, "usage": {**self.usage.as_dict()},
                "cost": decimal_json(self.cost)}


def turn_cost(turn: Turn) -> Decimal | None:
    """The turn's own cost, None when unknown."""
    return None if turn.cost_unknown else turn.cost


def turn_summary(turn: Turn, *, private: bool = True) -> JsonObject:
    """The turn's facts as JSON: status, position, usage, cost, error and timings.

    With ``private=False`` the principal and the output are left out.
    """
    summary: JsonObject = {
        "id": turn.pk, "agent": turn.agent_name, "status": turn.status, "model": turn.model,
        "conversation": turn.conversation_id, "depth": turn.depth,
        "parent_turn": turn.parent_turn_id, "root_turn": turn.root_turn_id,
        "usage": {**Usage.from_dict(turn.usage).as_dict()},
        "cost": None if turn.cost_unknown else decimal_text(turn.cost),
        "error": turn.error,
        "created_at": _iso(turn.created_at), "submitted_at": _iso(turn.submitted_at),
        "started_at": _iso(turn.started_at), "completed_at": _iso(turn.completed_at),
        "duration_seconds": ran_seconds(turn),
        "recovery_attempts": turn.recovery_attempts,
    }
    if private:
        summary.update(principal=turn.principal, output_text=turn.output_text,
                       output_data=turn.output_data)
    return summary


# ------------------------------------------------------------------------------------ the tree


class Tree:
    """The turns of one tree (a root and its descendants), read in one query."""

    def __init__(self, turns: Iterable[Turn]) -> None:
        self.turns = list(turns)
        self.by_id = {t.pk: t for t in self.turns}
        self.children: dict[str | None, list[Turn]] = defaultdict(list)
        for turn in self.turns:  # created_at order, so children come in launch order
            self.children[turn.parent_turn_id].append(turn)

    def in_parent_order(self, start: Turn | None = None) -> list[Turn]:
        """Turns depth first, each turn followed by its children (from ``start``, default the
        root)."""
        roots = [start] if start is not None else [t for t in self.turns if t.is_root]
        ordered: list[Turn] = []
        stack = list(reversed(roots))
        while stack:
            turn = stack.pop()
            ordered.append(turn)
            stack.extend(reversed(self.children.get(turn.pk, [])))
        return ordered

    def subtree(self, turn: Turn) -> list[Turn]:
        """``turn`` and its descendants, in parent order."""
        return self.in_parent_order(self.by_id.get(turn.pk, turn))

    def active_in(self, turn: Turn) -> list[Turn]:
        """Active turns of ``turn``'s subtree (what a cascade cancel would change)."""
        return [t for t in self.subtree(turn) if t.status in ACTIVE_TURN_STATUSES]

    def totals(self, turns: Iterable[Turn] | None = None) -> Totals:
        return Totals.of(self.turns if turns is None else turns)


def load_tree(turn: Turn) -> Tree:
    """The whole tree ``turn`` belongs to."""
    return Tree(Turn.objects.filter(root_turn_id=turn.root_turn_id).order_by("created_at"))


# ------------------------------------------------------------------------------ the transcript


@dataclass
class ToolResult:
    """A tool result as the model saw it, and how it reads (see :data:`OK` and the others)."""

    call_id: str
    name: str
    content: JsonValue
    state: str
    attempts: int = 0
    idempotency_key: str = ""

    @property
    def content_json(self) -> str:
        return pretty_json(self.content)

    @property
    def message(self) -> str:
        """The explanation carried by a repaired result ("outcome unknown", "not executed")."""
        return str(self.content.get("message", "")) if isinstance(self.content, dict) else ""

    def as_json(self) -> JsonObject:
        return {"type": "tool_result", "call_id": self.call_id, "name": self.name,
                "state": self.state, "content": self.content, "attempts": self.attempts}


@dataclass
class ToolCall:
    """A tool call of the model, with its execution and, for a sub-agent, the child's
    transcript."""

    call_id: str
    name: str
    arguments: JsonObject
    raw_arguments: str | None = None
    status: str = ""
    child: TurnTranscript | None = None

    @property
    def arguments_json(self) -> str:
        return self.raw_arguments if self.raw_arguments is not None else pretty_json(
            self.arguments)

    def as_json(self) -> JsonObject:
        data: JsonObject = {"type": "tool_call", "call_id": self.call_id, "name": self.name,
                            "arguments": self.arguments, "status": self.status or None}
        if self.raw_arguments is not None:
            data["raw_arguments"] = self.raw_arguments
        if self.child is not None:
            data["sub_agent"] = self.child.as_json()
        return data


@dataclass
class Entry:
    """One message: its text, tool calls, tool results and structured data, in part order."""

    sequence: int
    role: str
    kind: str
    created_at: datetime
    source: str = ""
    parts: list[str | ToolCall | ToolResult | TranscriptItem] = field(default_factory=list)

    @property
    def texts(self) -> list[str]:
        return [p for p in self.parts if isinstance(p, str)]

    @property
    def calls(self) -> list[ToolCall]:
        return [p for p in self.parts if isinstance(p, ToolCall)]

    @property
    def results(self) -> list[ToolResult]:
        return [p for p in self.parts if isinstance(p, ToolResult)]

    @property
    def items(self) -> list[Mapping[str, object]]:
        """Parts for templates: ``{"type": "text" | "thinking" | "data" | "other" | "call" |
        "result" | "image" | "analysis", "value": ...}`` (media items also carry a ``view``)."""
        items: list[Mapping[str, object]] = []
        for part in self.parts:
            if isinstance(part, str):
                items.append({"type": "text", "value": part})
            elif isinstance(part, ToolCall):
                items.append({"type": "call", "value": part})
            elif isinstance(part, ToolResult):
                items.append({"type": "result", "value": part})
            else:
                items.append(part)
        return items

    def as_json(self) -> JsonObject:
        parts: list[JsonValue] = []
        for part in self.parts:
            if isinstance(part, str):
                parts.append({"type": "text", "text": part})
            elif isinstance(part, ToolCall | ToolResult):
                parts.append(part.as_json())
            else:
                parts.append({"type": part["type"], "value": part["value"]})
        data: JsonObject = {"sequence": self.sequence, "role": self.role, "kind": self.kind,
                            "created_at": _iso(self.created_at), "parts": parts}
        if self.source:
            data["source"] = self.source
        return data


@dataclass
class TurnTranscript:
    """The messages one turn saw and wrote; ``others`` are child turns no tool call started."""

    turn: Turn
    entries: list[Entry]
    others: list[Turn] = field(default_factory=list)

    def as_json(self) -> JsonObject:
        return {"turn": turn_summary(self.turn),
                "messages": [e.as_json() for e in self.entries],
                "other_child_turns": [t.pk for t in self.others]}


def _result_state(part: ToolResultPart, execution: ToolExecution | None) -> str:
    error = part.content.get("error") if isinstance(part.content, dict) else None
    status = execution.status if execution is not None else ""
    if error == OUTCOME_UNKNOWN or status == ToolStatus.INTERRUPTED:
        return OUTCOME_UNKNOWN
    if error == NOT_EXECUTED or status == ToolStatus.CANCELLED:
        return NOT_EXECUTED
    return ERROR if part.is_error else OK


class _Builder:
    """Turns the rows of some turns into nested transcripts (no queries once built)."""

    def __init__(self, turns: Sequence[Turn], messages: Iterable[Message],
                 executions: Iterable[ToolExecution]) -> None:
        self.turns = list(turns)
        self.messages: dict[str, list[Message]] = defaultdict(list)
        for message in messages:
            self.messages[message.conversation_id].append(message)
        self.executions: dict[tuple[str | None, str], ToolExecution] = {
            (e.turn_id, e.tool_call_id): e for e in executions}
        self.child_of_execution = {t.parent_tool_execution_id: t for t in self.turns
                                   if t.parent_tool_execution_id is not None}
        self.children: dict[str, list[Turn]] = defaultdict(list)
        for turn in self.turns:
            if turn.parent_turn_id is not None:
                self.children[turn.parent_turn_id].append(turn)

    def turn(self, turn: Turn) -> TurnTranscript:
        seen = [m for m in self.messages[turn.conversation_id]
                if m.sequence <= turn.context_sequence or m.turn_id == turn.pk]
        nested: set[str] = set()
        entries = self.entries(seen, nested)
        others = [c for c in self.children[turn.pk] if c.pk not in nested]
        return TurnTranscript(turn, entries, others)

    def entries(self, messages: Iterable[Message], nested: set[str]) -> list[Entry]:
        entries = []
        for message in messages:
            entry = Entry(message.sequence, message.role, message.kind, message.created_at,
                          source=str((message.metadata or {}).get("source") or ""))
            for part in load_parts(message.content):
                entry.parts.append(self.part(message, part, nested))
            entries.append(entry)
        return entries

    def part(self, message: Message, part: Part,
             nested: set[str]) -> str | ToolCall | ToolResult | TranscriptItem:
        if isinstance(part, m.TextPart):
            return part.text
        if isinstance(part, m.ToolCallPart):
            execution = self.executions.get((message.turn_id, part.id))
            call = ToolCall(part.id, part.name, part.arguments, part.raw_arguments,
                            execution.status if execution else "")
            child = self.child_of_execution.get(execution.pk) if execution else None
            if child is not None:
                nested.add(child.pk)
                call.child = self.turn(child)
            return call
        if isinstance(part, ToolResultPart):
            execution = self.executions.get((message.turn_id, part.tool_call_id))
            return ToolResult(part.tool_call_id, part.name, part.content,
                              _result_state(part, execution),
                              attempts=execution.attempts if execution else 0,
                              idempotency_key=execution.idempotency_key if execution else "")
        if isinstance(part, m.ThinkingPart):
            return {"type": "thinking", "value": "[redacted]" if part.redacted else part.text}
        if isinstance(part, m.DataPart):
            return {"type": "data", "value": pretty_json(part.data)}
        if isinstance(part, ImagePart | MediaAnalysisPart):
            return media_item(message, part)
        return {"type": "other", "value": part.kind}


def _builder(turns: Sequence[Turn], conversation_ids: Iterable[str]) -> _Builder:
    ids = [t.pk for t in turns]
    last_seen = max((t.context_sequence for t in turns), default=0)
    messages = Message.objects.filter(conversation_id__in=set(conversation_ids)).filter(
        Q(sequence__lte=last_seen) | Q(turn_id__in=ids)).order_by("conversation_id", "sequence")
    return _Builder(turns, messages, ToolExecution.objects.filter(turn_id__in=ids))


def turn_transcript(turn: Turn, tree: Tree | None = None) -> TurnTranscript:
    """What ``turn`` saw and wrote, with its sub-agents' transcripts nested (three queries, or
    two given its ``tree``)."""
    tree = tree or load_tree(turn)
    subtree = tree.subtree(turn)
    return _builder(subtree, {t.conversation_id for t in subtree}).turn(
        tree.by_id.get(turn.pk, turn))


@dataclass
class ConversationTranscript:
    """Every message of a conversation, its turns (with their trees) and their totals."""

    conversation: Conversation
    turns: list[Turn]
    entries: list[Entry]
    totals: Totals
    tree_totals: Totals

    def as_json(self) -> JsonObject:
        return {"conversation": {"id": self.conversation.pk,
                                 "agent": self.conversation.agent_name,
                                 "messages": self.conversation.last_sequence},
                "turns": [turn_summary(t) for t in self.turns],
                "totals": self.totals.as_json(), "tree_totals": self.tree_totals.as_json(),
                "messages": [e.as_json() for e in self.entries]}


def conversation_turns(conversation: Conversation) -> tuple[list[Turn], Tree]:
    """The conversation's turns (oldest first) and the trees they belong to, in one query."""
    roots = Turn.objects.filter(conversation_id=conversation.pk).values("root_turn_id")
    tree = Tree(Turn.objects.filter(root_turn_id__in=roots).order_by("created_at"))
    return [t for t in tree.turns if t.conversation_id == conversation.pk], tree


def conversation_transcript(conversation: Conversation,
                            *, transcript: bool = True) -> ConversationTranscript:
    """The conversation's messages (sub-agents nested), turns and totals; without
    ``transcript`` only the turns and totals (one query)."""
    own, tree = conversation_turns(conversation)
    below: dict[str, Turn] = {}
    for turn in own:
        below.update((t.pk, t) for t in tree.subtree(turn))
    entries: list[Entry] = []
    if transcript:
        turns = list(below.values())
        builder = _Builder(
            turns,
            Message.objects.filter(
                conversation_id__in={conversation.pk, *(t.conversation_id for t in turns)}
            ).order_by("conversation_id", "sequence"),
            ToolExecution.objects.filter(turn_id__in=below))
        entries = builder.entries(builder.messages[conversation.pk], set())
    return ConversationTranscript(conversation, own, entries, Totals.of(own),
                                  Totals.of(below.values()))
