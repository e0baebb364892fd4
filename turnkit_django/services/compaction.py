"""Manual compaction of a conversation (``Conversation.compact()``), outside any turn."""

from __future__ import annotations

from ..agents import AgentDefinition
from ..agents.compaction import merged_options
from ..base.serialization import decimal_json
from ..clients import Client
from ..clients.cost import response_cost
from ..exceptions import CompactionError
from ..messages import TextPart
from ..models import Conversation, Message
from ..runtime.compaction import (
    SUMMARY_KIND,
    choose,
    summary_metadata,
    summary_request,
    summary_text,
)
from ..store import NewMessage, append_summary, refuse_if_busy, to_chat
from ..store.input_checks import optional_count, optional_text


def compact_conversation(conversation_id: str, agent: AgentDefinition, *,
                         focus: str | None = None, keep_last: int | None = None,
                         client: Client | None = None) -> Message:
    """Summarise a conversation's older messages outside any turn; return the summary row.

    The summariser's usage and cost are recorded on the summary message's metadata (there is
    no turn to charge). Raises CompactionError when there is nothing to compact, when a turn of
    the conversation is active, or when the summary is empty.
    """
    focus = optional_text(focus, "conv.compact()'s focus") or None
    keep_last = optional_count(keep_last, "conv.compact()'s keep_last")
    options, _ = merged_options(agent.name, agent.compaction)
    refuse_if_busy(conversation_id)
    rows = Message.objects.filter(conversation_id=conversation_id).order_by("sequence")
    keep = int(options["tail_messages"] if keep_last is None else keep_last)
    chosen = choose([to_chat(m) for m in rows], keep)
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
    summary = summary_text(response)
    cost = response_cost(response.model or model, response)
    metadata = summary_metadata(rng, options, model, focus, False,
                                usage=response.usage.as_dict(), cost=decimal_json(cost))
    # Checked again as it is appended: a summary inside a tool exchange breaks the transcript.
    return append_summary(conversation_id, NewMessage(
        "assistant", [TextPart(summary)], kind=SUMMARY_KIND, metadata=metadata))


__all__ = ["compact_conversation"]
