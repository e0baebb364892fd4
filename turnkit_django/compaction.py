"""Compaction: summarise older messages so a long history fits the model's context.

The summary is *appended* as an assistant message of kind ``context_summary`` whose metadata
records the replaced sequence range; every original message stays in the transcript. Only the
request built for the model changes: the newest visible summary stands in for its range, and
older summaries are dropped (a newer summary covers them, because its range starts at the
beginning of the history and the summariser read the older summary). A range never ends between
a tool call and its results.

Automatic compaction runs before a model call when the estimated request size reaches
``threshold`` of the usable context (``context_limit - reserved_tokens``). Its failures are
logged and ignored, except budget errors and lost claims. Manual compaction
(``Conversation.compact()``) raises :class:`~turnkit_django.exceptions.CompactionError`.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.db import transaction
from django.utils import timezone

from . import failpoints, internal
from .clients.base import Client, ModelRequest, ModelResponse
from .cost import compute_cost
from .exceptions import BudgetExceeded, CompactionError, ConfigurationError, LostClaim
from .messages import ChatMessage, TextPart, ToolCallPart, ToolResultPart, dump_parts
from .prompts import data_block, render_value

if TYPE_CHECKING:
    from .agents import Agent
    from .models import Message
    from .runtime import Execution

logger = logging.getLogger("turnkit_django.compaction")

SUMMARY_KIND = "context_summary"
REQUEST_KIND = "context_summary_request"  # the synthetic question before a summary
DEFAULTS: dict[str, Any] = {
    "enabled": True,
    "context_limit": 128_000,
    "threshold": 0.75,
    "reserved_tokens": 20_000,
    "tail_messages": 12,
    "tool_output_max_chars": 2_000,
    "model": None,
}
SUMMARY_INSTRUCTIONS = """\
You compact the history of an agent's conversation so that work can continue from your summary
alone. Write markdown with these headings, leaving out any that would be empty:

## Task
The user's current request, in their words where it matters.
## Constraints and preferences
## Done so far
Actions taken and their outcomes, including tool calls that changed something.
## Current state
## Open questions
Questions asked and not yet answered, by either side.
## Next steps
## Facts to keep
Exact identifiers, names, numbers, file paths, tool results and loaded skills needed later.

Be complete but brief. Never copy secrets (passwords, API keys, tokens); write [redacted]."""
QUESTION = "Summarise our conversation so far."
BANNER = (
    "Summary of the earlier conversation (compacted). Use it as reference only: if it "
    "disagrees with a later message, the later message wins.\n\n"
)


# --------------------------------------------------------------------------- options


def check_options(value: Any, where: str) -> dict[str, Any] | None:
    """Validate a compaction setting (True, False, None or a dict); return the dict or None."""
    if value is None or value is True:
        return {}
    if value is False:
        return None
    if not isinstance(value, dict):
        raise ConfigurationError(f"{where}: compaction must be True, False or a dict of options")
    unknown = set(value) - set(DEFAULTS)
    if unknown:
        raise ConfigurationError(
            f"{where}: unknown compaction options {sorted(unknown)}; use {sorted(DEFAULTS)}"
        )
    for key in ("context_limit", "reserved_tokens", "tail_messages", "tool_output_max_chars"):
        number = value.get(key, DEFAULTS[key])
        if not isinstance(number, int) or isinstance(number, bool) or number < 0:
            raise ConfigurationError(f"{where}: compaction {key} must be an integer >= 0")
    threshold = value.get("threshold", DEFAULTS["threshold"])
    if not isinstance(threshold, int | float) or not 0 < threshold <= 1:
        raise ConfigurationError(f"{where}: compaction threshold must be in (0, 1]")
    limit = value.get("context_limit", DEFAULTS["context_limit"])
    if limit <= value.get("reserved_tokens", DEFAULTS["reserved_tokens"]):
        raise ConfigurationError(f"{where}: compaction context_limit must exceed reserved_tokens")
    return dict(value)


def merged_options(agent: Agent) -> tuple[dict[str, Any], bool]:
    """The agent's options (defaults, then global, then agent) and whether automatic is on."""
    from .conf import turnkit_settings

    global_ = check_options(turnkit_settings.COMPACTION, 'TURNKIT["COMPACTION"]')
    own = check_options(agent.compaction, f"agent {agent.name!r}")
    merged = {**DEFAULTS, **(global_ or {}), **(own or {})}
    return merged, global_ is not None and own is not None and bool(merged["enabled"])


def options_for(agent: Agent) -> dict[str, Any] | None:
    """The options of automatic compaction, or None when it is off for this agent."""
    merged, enabled = merged_options(agent)
    return merged if enabled else None


# --------------------------------------------------------------------------- projection


def _is_summary(message: ChatMessage) -> bool:
    return message.kind == SUMMARY_KIND and "replaced_range" in message.metadata


def _summary_lead(summary: ChatMessage, next_role: str | None) -> list[ChatMessage]:
    """The messages standing for the range, keeping user and assistant turns alternating."""
    text = BANNER + summary.text
    if next_role == "assistant":
        return [ChatMessage("user", (TextPart(f"{QUESTION}\n\n{text}"),), SUMMARY_KIND,
                            summary.sequence, summary.metadata)]
    return [ChatMessage("user", (TextPart(QUESTION),), REQUEST_KIND),
            ChatMessage("assistant", (TextPart(text),), SUMMARY_KIND, summary.sequence,
                        summary.metadata)]


def project(messages: Sequence[ChatMessage]) -> list[ChatMessage]:
    """What the model sees: the newest summary in place of its range, older summaries gone."""
    latest = next((m for m in reversed(messages) if _is_summary(m)), None)
    if latest is None:
        return list(messages)
    start, end = latest.metadata["replaced_range"]
    out = [m for m in messages if not _is_summary(m)
           and not (m.sequence is not None and start <= m.sequence <= end)]
    # The range starts at the head of the history, so the summary leads what is left.
    return _summary_lead(latest, out[0].role if out else None) + out


def estimate(request: ModelRequest) -> int:
    """Estimated tokens of a request: about four characters a token, plus 8 per message."""
    chars = len(request.instructions)
    chars += sum(len(json.dumps(dump_parts(m.parts), default=str)) for m in request.messages)
    chars += sum(len(t.description) + len(json.dumps(t.parameters)) for t in request.tools)
    return chars // 4 + 8 * len(request.messages)


def choose(messages: Sequence[ChatMessage], keep_last: int) -> tuple[list[ChatMessage],
                                                                   tuple[int, int]] | None:
    """Pick the head to summarise and its sequence range, or None when there is too little.

    The tail keeps at least ``keep_last`` messages and never starts with a tool result whose
    call is in the head.
    """
    visible = [m for m in project(messages) if m.kind != REQUEST_KIND]
    cut = len(visible) - keep_last
    while cut >= 2 and not _clean_cut(visible, cut):
        cut -= 1
    if cut < 2:
        return None
    head = visible[:cut]
    first = head[0]
    start = first.metadata["replaced_range"][0] if _is_summary(first) else first.sequence
    end = head[-1].sequence
    if start is None or end is None:
        return None
    return head, (int(start), int(end))


def _clean_cut(visible: Sequence[ChatMessage], cut: int) -> bool:
    calls = {c.id for m in visible[:cut] for c in m.tool_calls}
    return not any(r.tool_call_id in calls for m in visible[cut:] for r in m.tool_results)


# --------------------------------------------------------------------------- summarising


def _render(head: Sequence[ChatMessage], max_tool_chars: int) -> str:
    lines = []
    for message in head:
        if _is_summary(message):
            lines.append(f"[earlier summary]\n{message.text.split(BANNER, 1)[-1]}")
            continue
        for part in message.parts:
            if isinstance(part, TextPart) and part.text:
                lines.append(f"[{message.role}] {part.text}")
            elif isinstance(part, ToolCallPart):
                lines.append(f"[tool call {part.name}] {render_value(part.arguments)}")
            elif isinstance(part, ToolResultPart):
                result = render_value(part.content)
                if len(result) > max_tool_chars:
                    result = result[:max_tool_chars] + " [... cut]"
                failed = " (failed)" if part.is_error else ""
                lines.append(f"[tool result {part.name}{failed}] {result}")
    return "\n\n".join(lines)


def summary_request(head: Sequence[ChatMessage], options: dict[str, Any], model: str,
                    focus: str | None) -> ModelRequest:
    """The request asking the model to summarise ``head``."""
    transcript = _render(head, int(options["tool_output_max_chars"]))
    ask = "Summarise the conversation in the data block below."
    if focus:
        ask += f" Pay most attention to: {focus}"
    # The transcript may hold up to the whole usable context (about four characters a token).
    text = f"{ask}\n\n{data_block('conversation', transcript, int(options['context_limit']) * 3)}"
    return ModelRequest(model=model, messages=(ChatMessage("user", (TextPart(text),)),),
                        stable_instructions=SUMMARY_INSTRUCTIONS,
                        metadata={"purpose": "compaction", "focus": focus})


def _summary_text(response: ModelResponse) -> str:
    summary = response.text.strip()
    if not summary:
        raise CompactionError(
            "the summariser returned an empty summary; nothing was compacted (check the "
            "compaction model, or retry)"
        )
    return summary


def _metadata(rng: tuple[int, int], options: dict[str, Any], model: str, focus: str | None,
              auto: bool, **extra: Any) -> dict[str, Any]:
    return {"replaced_range": list(rng), "model": model, "focus": focus, "auto": auto,
            "tail_messages": options["tail_messages"], "compacted_at": timezone.now().isoformat(),
            **extra}


def compact_turn(ex: Execution, options: dict[str, Any], estimated_tokens: int) -> bool:
    """Summarise the turn's older visible messages; return whether a summary was appended."""
    chosen = choose(ex.visible, int(options["tail_messages"]))
    if chosen is None:
        return False
    head, rng = chosen
    model = options["model"] or ex.row.model
    response = internal.call(ex, summary_request(head, options, model, None), "compaction")
    summary = _summary_text(response)
    with ex.fenced.atomic():
        fields, cost = internal.charge(ex, response, model)
        message = ex.fenced.append(
            "assistant", [TextPart(summary)], kind=SUMMARY_KIND,
            metadata=_metadata(rng, options, model, None, True, turn_id=ex.row.pk,
                               estimated_tokens=estimated_tokens,
                               usage=response.usage.as_dict(),
                               cost=None if cost is None else str(cost)),
        )
        ex.fenced.update_turn(**fields)
    internal.completed(ex, response, model, cost, "compaction")
    ex._remember(message)
    failpoints.hit("after_compaction_commit")
    return True


def auto_compact(ex: Execution, request: ModelRequest) -> ModelRequest:
    """Compact before a model call when the request is near the context limit."""
    options = options_for(ex.agent)
    if options is None:
        return request
    usable = (options["context_limit"] - options["reserved_tokens"]) * options["threshold"]
    size = estimate(request)
    if size < usable:
        return request
    try:
        compacted = compact_turn(ex, options, size)
    except (BudgetExceeded, LostClaim):
        raise
    except Exception:
        # The request may still fit (the estimate is rough); the model call decides.
        logger.warning("automatic compaction of turn %r failed", ex.row.pk, exc_info=True)
        return request
    return ex.build_request() if compacted else request


def compact_conversation(conversation_id: str, agent: Agent, *, focus: str | None = None,
                         keep_last: int | None = None, client: Client | None = None) -> Message:
    """Summarise a conversation's older messages outside any turn; return the summary row.

    The summariser's usage and cost are recorded on the summary message's metadata (there is
    no turn to charge). Raises CompactionError when there is nothing to compact, when a turn of
    the conversation is active, or when the summary is empty.
    """
    from .models import Conversation, Message
    from .runtime import Execution
    from .store import NewMessage, insert_messages

    options, _ = merged_options(agent)
    _refuse_if_busy(conversation_id)
    rows = Message.objects.filter(conversation_id=conversation_id).order_by("sequence")
    messages = [Execution._chat(m) for m in rows]
    keep = int(options["tail_messages"] if keep_last is None else keep_last)
    chosen = choose(messages, keep)
    if chosen is None:
        raise CompactionError(
            f"conversation {conversation_id!r} has too few messages to compact while keeping "
            f"the last {keep}; pass a smaller keep_last"
        )
    head, rng = chosen
    conversation = Conversation.objects.get(pk=conversation_id)
    model = options["model"] or conversation.model or agent.resolved_model()
    response = (client or agent.resolved_client()).complete(
        summary_request(head, options, model, focus))
    summary = _summary_text(response)
    cost = compute_cost(response.model or model, response.usage, response.reported_cost)
    with transaction.atomic():
        # Checked again: a summary between a tool call and its result would break the transcript.
        _refuse_if_busy(conversation_id)
        metadata = _metadata(rng, options, model, focus, False, usage=response.usage.as_dict(),
                             cost=None if cost is None else str(cost))
        return insert_messages(conversation_id, [
            NewMessage("assistant", [TextPart(summary)], kind=SUMMARY_KIND, metadata=metadata)
        ])[0]


def _refuse_if_busy(conversation_id: str) -> None:
    from .models import Turn
    from .states import TurnStatus

    busy = [TurnStatus.RUNNING, TurnStatus.WAITING, TurnStatus.PAUSED]
    if Turn.objects.filter(conversation_id=conversation_id, status__in=busy).exists():
        raise CompactionError(
            f"conversation {conversation_id!r} has an active turn; compact it when it is idle"
        )


__all__ = ["SUMMARY_KIND", "auto_compact", "compact_conversation", "compact_turn", "estimate",
           "merged_options", "options_for", "project"]
