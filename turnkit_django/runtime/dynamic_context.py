"""Dynamic context snapshots: the changing part of the prompt kept in the history.

A client with ``dynamic_context_in_history = True`` (the OpenAI-compatible client, whose
provider caches request prefixes) gets only the stable sections of the system prompt as its
instructions, byte-identical across requests and turns, and the dynamic sections (subject, live
context, environment) as user messages of kind ``dynamic_context`` in the history:

* before a model call the dynamic sections are compared with the newest snapshot the model would
  see (after compaction's projection); when they differ, a new snapshot is appended, in a fenced
  write of its own before the model call, so the history stays append-only and its prefix stays
  cacheable across steps, retries and resumed turns;
* when the dynamic part becomes empty, a snapshot saying so follows the last one;
* a snapshot that compaction summarised away is sent again in full with the next call;
* a preview shows the snapshot the next call would append, and writes nothing.

Other clients get the stable and dynamic instructions apart (``stable_instructions`` and
``dynamic_instructions`` of the request): the Anthropic client marks the stable block for its
prompt cache and sends the dynamic one after it, uncached.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..agents.prompting import Prompt
from ..messages import DYNAMIC_CONTEXT, ChatMessage, TextPart
from .compaction import SUMMARY_KIND, project
from .context import TurnContext
from .prompts import compose

HEADER = "Current context (it replaces any earlier context update):"
EMPTY = f"{HEADER} none."


def wanted(client: Any) -> bool:
    """Whether ``client`` takes the dynamic context in the history."""
    return bool(getattr(client, "dynamic_context_in_history", False))


def snapshot_text(prompt: Prompt) -> str:
    dynamic = prompt.dynamic
    return f"{HEADER}\n\n{dynamic}" if dynamic else EMPTY


def latest(messages: Sequence[ChatMessage]) -> str | None:
    """The text of the newest snapshot among ``messages``."""
    return next((m.text for m in reversed(messages) if m.kind == DYNAMIC_CONTEXT), None)


def pending(prompt: Prompt, projected: Sequence[ChatMessage]) -> str | None:
    """The snapshot the next request needs appended, or None when the model has it already."""
    text = snapshot_text(prompt)
    last = latest(projected)
    if last == text or (last is None and not prompt.dynamic):
        return None
    return text


def record(ctx: TurnContext) -> Prompt:
    """Compose the turn's prompt; append its snapshot first when the client wants one and the
    model has not seen it (a fenced write, before the model call)."""
    prompt = compose(ctx.agent, ctx.row, ctx.conversation)
    if wanted(ctx.client):
        compacted = SUMMARY_KIND in ctx.history.kinds
        text = pending(prompt, project(ctx.visible) if compacted else ctx.visible)
        if text is not None:
            sections = [s.name for s in prompt.sections if not s.stable and s.text]
            message = ctx.fenced.step(lambda _ledger: ctx.fenced.append(
                "user", [TextPart(text)], kind=DYNAMIC_CONTEXT,
                metadata={"source": "dynamic_context", "sections": sections}))
            ctx.remember(message)
    return prompt


def apply(ctx: TurnContext, prompt: Prompt,
          messages: list[ChatMessage]) -> tuple[list[ChatMessage], str]:
    """The request's messages and dynamic instructions for the turn's client."""
    if not wanted(ctx.client):
        return messages, prompt.dynamic
    text = pending(prompt, messages)
    if text is not None:  # not recorded (a preview): show what the call would append
        messages = [*messages, ChatMessage("user", (TextPart(text),), DYNAMIC_CONTEXT)]
    return messages, ""


__all__ = ["EMPTY", "HEADER", "apply", "latest", "pending", "record", "snapshot_text", "wanted"]
