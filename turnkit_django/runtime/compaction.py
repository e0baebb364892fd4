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

from django.utils import timezone

from ..agents.compaction import CompactionOptions, options_for
from ..agents.prompting import data_block, render_value
from ..base import failpoints
from ..base.serialization import JsonMapping, decimal_json
from ..clients import ModelRequest, ModelResponse
from ..exceptions import BudgetExceeded, CompactionError, LostClaim
from ..messages import (
    DYNAMIC_CONTEXT,
    MEDIA_KINDS,
    ChatMessage,
    MessageKind,
    TextPart,
    ToolCallPart,
    ToolResultPart,
)
from . import internal
from .context import TurnContext
from .media_projection import describe

logger = logging.getLogger("turnkit_django.compaction")

SUMMARY_KIND = MessageKind.CONTEXT_SUMMARY
REQUEST_KIND = "context_summary_request"  # the synthetic question before a summary
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
    """What the model sees: the newest summary in place of its range, older summaries gone.

    ``messages`` is a transcript, in sequence order. A summary's range starts at the head of
    the history, so every message up to the range's last one is replaced: the work is
    proportional to what follows the range, not to the length of the history. (The range can end
    before an older summary: the tail that summary kept, then parts of it, are summarised again.)
    """
    at = next((i for i in range(len(messages) - 1, -1, -1)
               if messages[i].kind == SUMMARY_KIND and _is_summary(messages[i])), None)
    if at is None:
        return list(messages)
    latest = messages[at]
    end = latest.metadata["replaced_range"][1]
    first = at  # back from the summary to the first message past the range
    while first > 0 and not _replaced(messages[first - 1], end):
        first -= 1
    out = [m for m in messages[first:] if not _is_summary(m)]
    return _summary_lead(latest, out[0].role if out else None) + out


def _replaced(message: ChatMessage, end: int) -> bool:
    return message.sequence is not None and message.sequence <= end


def estimate(request: ModelRequest) -> int:
    """Estimated tokens of a request: about four characters a token, plus 8 per message."""
    chars = len(request.instructions)
    chars += sum(m.size for m in request.messages)
    chars += sum(len(t.description) + len(json.dumps(t.parameters)) for t in request.tools)
    return chars // 4 + 8 * len(request.messages)


def choose(messages: Sequence[ChatMessage], keep_last: int) -> tuple[list[ChatMessage],
                                                                   tuple[int, int]] | None:
    """Pick the head to summarise and its sequence range, or None when there is too little.

    The tail keeps at least ``keep_last`` messages and never starts with a tool result whose
    call is in the head.
    """
    visible = [m for m in project(messages) if m.kind != REQUEST_KIND]
    cut = _clean_cut(visible, len(visible) - keep_last)
    if cut < 2:
        return None
    head = visible[:cut]
    first = head[0]
    start = first.metadata["replaced_range"][0] if _is_summary(first) else first.sequence
    end = head[-1].sequence
    if start is None or end is None:
        return None
    return head, (int(start), int(end))


def _clean_cut(visible: Sequence[ChatMessage], most: int) -> int:
    """The greatest cut at most ``most`` that parts no tool call from its result (-1: none).

    A result answers the nearest earlier call with its id (ids may repeat across turns), so
    each call and its result span an interval of positions that no cut may fall inside. One
    pass over the messages: the intervals are marked in a difference array.
    """
    blocked = [0] * (len(visible) + 2)
    calls: dict[str, int] = {}
    for position, message in enumerate(visible):
        for result in message.tool_results:
            start = calls.pop(result.tool_call_id, None)
            if start is not None and start < position:  # cuts start+1 .. position are inside
                blocked[start + 1] += 1
                blocked[position + 1] -= 1
        for call in message.tool_calls:
            calls[call.id] = position
    inside, clean = 0, -1
    for cut in range(min(most, len(visible)) + 1):
        inside += blocked[cut]
        if inside == 0:
            clean = cut
    return clean


# --------------------------------------------------------------------------- summarising


def _render(head: Sequence[ChatMessage], max_tool_chars: int) -> str:
    lines = []
    for message in head:
        if message.kind == DYNAMIC_CONTEXT:
            continue  # the current snapshot is sent again after the summary
        if _is_summary(message):
            lines.append(f"[earlier summary]\n{message.text.split(BANNER, 1)[-1]}")
            continue
        if message.kind in MEDIA_KINDS:  # an image or an analysis: its description only
            lines.append(f"[{message.kind}] {describe(message)}")
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


def summary_request(head: Sequence[ChatMessage], options: CompactionOptions, model: str,
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


def summary_text(response: ModelResponse) -> str:
    summary = response.text.strip()
    if not summary:
        raise CompactionError(
            "the summariser returned an empty summary; nothing was compacted (check the "
            "compaction model, or retry)"
        )
    return summary


def summary_metadata(rng: tuple[int, int], options: CompactionOptions, model: str,
                     focus: str | None, auto: bool, **extra: object) -> JsonMapping:
    return {"replaced_range": list(rng), "model": model, "focus": focus, "auto": auto,
            "tail_messages": options["tail_messages"], "compacted_at": timezone.now().isoformat(),
            **extra}


def compact_turn(ctx: TurnContext, options: CompactionOptions, estimated_tokens: int) -> bool:
    """Summarise the turn's older visible messages; return whether a summary was appended."""
    chosen = choose(ctx.visible, int(options["tail_messages"]))
    if chosen is None:
        return False
    head, rng = chosen
    model = options["model"] or ctx.row.model
    response = internal.call(ctx, summary_request(head, options, model, None), "compaction")
    summary = summary_text(response)
    price = internal.price(response, model)
    with ctx.fenced.atomic() as ledger:
        fee, delta, cost = internal.charge(ctx, ledger, response, model, price)
        message = ctx.fenced.append(
            "assistant", [TextPart(summary)], kind=SUMMARY_KIND,
            metadata=summary_metadata(rng, options, model, None, True, turn_id=ctx.row.pk,
                                      estimated_tokens=estimated_tokens,
                                      usage=response.usage.as_dict(),
                                      cost=decimal_json(cost)),
        )
        ctx.fenced.record(charge=fee, delta=delta)
    ctx.row.usage = fee.usage
    internal.completed(ctx, response, model, cost, "compaction")
    ctx.remember(message)
    failpoints.hit("after_compaction_commit")
    return True


def auto_compact(ctx: TurnContext, request: ModelRequest) -> bool:
    """Compact before a model call when the request is near the context limit; return whether
    a summary was appended (the caller builds the request again)."""
    turn_setting = (ctx.row.options or {}).get("compaction")
    options = options_for(ctx.agent.name, ctx.agent.compaction if turn_setting is None
                          else turn_setting)
    if options is None:
        return False
    usable = (options["context_limit"] - options["reserved_tokens"]) * options["threshold"]
    size = estimate(request)
    if size < usable:
        return False
    try:
        return compact_turn(ctx, options, size)
    except (BudgetExceeded, LostClaim):
        raise
    except Exception:
        # The request may still fit (the estimate is rough); the model call decides.
        logger.warning("automatic compaction of turn %r failed", ctx.row.pk, exc_info=True)
        return False


__all__ = ["SUMMARY_KIND", "auto_compact", "choose", "compact_turn", "estimate", "project",
           "summary_metadata", "summary_request", "summary_text"]
