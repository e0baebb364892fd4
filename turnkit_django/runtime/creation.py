"""Creating conversations and turns for an agent: its definition decides the write-once options."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..agents import AgentDefinition, schema_json
from ..agents.compaction import check_options as check_compaction
from ..agents.definition import Schema, check_thinking
from ..agents.prompting import check_options
from ..base.serialization import JsonMapping, JsonObject, JsonValue, json_value, snapshot
from ..conf import turnkit_settings
from ..exceptions import ConfigurationError, InputError
from ..messages import Part
from ..observability import tracing
from ..store import (
    Claim,
    Ledger,
    NewConversation,
    NewTurn,
    build_conversation,
    create_claimed,
    create_conversation,
    create_turn,
    keyed_write,
)
from ..store.claims import Prepare
from ..store.input_checks import delta_callback, model_problem, require_subject
from .submission import dispatch

if TYPE_CHECKING:
    from django.db.models import Model

    from ..models import Conversation, Message, ToolExecution, Turn


def new_conversation(
    agent: AgentDefinition,
    *,
    principal: object = None,
    context: JsonObject | None = None,
    metadata: JsonObject | None = None,
    subject: Model | None = None,
    model: str | None = None,
    parent: Turn | None = None,
    parent_execution: ToolExecution | None = None,
) -> Conversation:
    """Create a conversation with ``agent``; a ``subject`` row's prompt text is snapshotted."""
    return create_conversation(conversation_spec(
        agent, principal=principal, context=context, metadata=metadata, subject=subject,
        model=model, parent=parent, parent_execution=parent_execution))


def check_model(model: object) -> None:
    """Refuse a ``model=`` option that is no model name, before anything is written."""
    problem = model_problem(model)
    if problem:
        raise InputError(f"model= {problem}")


def conversation_spec(
    agent: AgentDefinition,
    *,
    principal: object = None,
    context: JsonObject | None = None,
    metadata: JsonObject | None = None,
    subject: Model | None = None,
    model: str | None = None,
    parent: Turn | None = None,
    parent_execution: ToolExecution | None = None,
) -> NewConversation:
    """What :func:`new_conversation` creates, checked."""
    check_model(model)
    checked = json_value(principal, "principal")
    subject = require_subject(subject)
    subject_prompt = ""
    if subject is not None:
        to_prompt = getattr(subject, "to_prompt", None)
        subject_prompt = str(to_prompt() if callable(to_prompt) else subject)
    return NewConversation(
        agent_name=agent.name, model=model or agent.resolved_model(), principal=checked,
        context=snapshot(context or {}, "context"), metadata=snapshot(metadata or {}, "metadata"),
        subject=subject, subject_prompt=subject_prompt, parent=parent,
        parent_execution=parent_execution)


def turn_options(agent: AgentDefinition, *, output_schema: Schema = None,
                 thinking: JsonObject | bool | None = None, prompt_mode: str | None = None,
                 compaction: bool | JsonObject | None = None, root: bool = True,
                 **extra: JsonValue) -> JsonObject:
    """The write-once options of a new turn of ``agent``: its limits snapshot when a root (the
    tree's ledger), else the count limits the agent set itself, when it set any (they bound
    this turn's own counts, inside the tree's ledger: :func:`.budget.own_budget`)."""
    check_options(agent.name, prompt_mode, None)
    check_thinking(thinking, f"turn of agent {agent.name!r}")
    check_compaction(compaction, f"turn of agent {agent.name!r}")
    options: JsonObject = {
        "output_schema": schema_json(output_schema or agent.output_schema),
        "thinking": thinking if thinking is not None else agent.thinking,
        "prompt_mode": prompt_mode,
        **extra,
    }
    if compaction is not None:
        options["compaction"] = compaction
    if root:
        options["limits"] = agent.limits().as_json()
    elif own := agent.own_limits():
        options["own_limits"] = own
    return options


def new_turn(agent: AgentDefinition, parts: Sequence[Part] = (), *,
             message_metadata: JsonMapping | None = None, message_key: str | None = None,
             submit: bool = False, on_delta: object = None, **options: Any) -> Turn:
    """Create a pending turn (and its conversation and input message when needed).

    With ``submit``, a root turn is created already handed to background execution, in the
    same write, and its doorbell rings once the current transaction commits: what
    ``submit()`` does for a turn without waits or callback. ``options`` are those of
    :func:`turn_spec`.
    """
    delta_callback(on_delta, inline=False)  # a pending turn is not run here
    conversation, spec = turn_spec(agent, **options)
    with keyed_write(conversation.pk, message_key if parts else None):
        turn = create_turn(spec, conversation, parts, message_metadata=message_metadata,
                           message_key=message_key, submit=submit)
    if submit:
        dispatch(turn.pk, submitted=turn)
    return turn


def new_claimed_turn(agent: AgentDefinition, parts: Sequence[Part], worker: str, *,
                     prepare: Prepare | None = None,
                     message_metadata: JsonObject | None = None,
                     message_key: str | None = None, **options: Any,
                     ) -> tuple[Claim, Turn, Ledger, Message | None]:
    """Create a root turn already claimed by ``worker`` (an inline run; see
    :func:`~turnkit_django.store.create_claimed`); ``options`` as for :func:`turn_spec`."""
    conversation, spec = turn_spec(agent, **options)
    with keyed_write(conversation.pk, message_key if parts else None):
        return create_claimed(spec, conversation, parts, worker, prepare=prepare,
                              message_metadata=message_metadata, message_key=message_key)


def turn_spec(
    agent: AgentDefinition,
    *,
    conversation: Conversation | None = None,
    parent: Turn | None = None,
    parent_execution: ToolExecution | None = None,
    principal: object = None,
    context: JsonObject | None = None,
    output_schema: Schema = None,
    thinking: JsonObject | bool | None = None,
    prompt_mode: str | None = None,
    model: str | None = None,
    compaction: bool | JsonObject | None = None,
    options: JsonObject | None = None,
    metadata: JsonObject | None = None,
    subject: Model | None = None,
    tree: Turn | None = None,
    turn_id: str | None = None,
) -> tuple[Conversation, NewTurn]:
    """A new turn's conversation (unsaved when it is new too) and the turn to create, checked.

    ``options`` are extra write-once options recorded with the turn's own; ``metadata`` and
    ``subject`` describe a new conversation and are refused with an existing one. With
    ``tree`` (a turn), the new turn is a root-level task of that turn's tree: it shares the
    root's budget and deadline (its agent's own count limits, when it set any, bound its own
    counts: :func:`turn_options`).
    """
    if conversation is not None and (metadata is not None or subject is not None):
        raise TypeError("metadata and subject describe a new conversation; set them when the "
                        "conversation is created (agent.conversation(metadata=..., subject=...))")
    check_model(model)
    checked = json_value(principal, "principal")
    extra = dict(options or {})
    # The trace it continues (tracing.turn_span): the running turn's span, else the one given
    # (a continuation's sender's), its parent's or its tree's, else the caller's current span.
    inherited = parent if parent is not None else tree
    trace = tracing.carrier(extra.pop("trace", None) or (
        inherited and (inherited.options or {}).get("trace")))
    turn_config = turn_options(agent, output_schema=output_schema, thinking=thinking,
                               prompt_mode=prompt_mode, compaction=compaction,
                               root=parent is None and tree is None, **extra)
    if trace is not None:
        turn_config["trace"] = trace
    if conversation is None:
        conversation = build_conversation(conversation_spec(
            agent, principal=checked, context=context, parent=parent,
            parent_execution=parent_execution, model=model, metadata=metadata,
            subject=subject))
    spec = NewTurn(
        agent_name=agent.name,
        options=turn_config,
        model=model or conversation.model or agent.resolved_model(),
        principal=checked,
        # A deep copy: later changes to the caller's dict never reach the turn.
        context=None if context is None else snapshot(context, "context"),
        parent=parent,
        parent_execution=parent_execution,
        tree=tree,
        id=turn_id,
        tenant=tenant_of(checked if checked is not None else conversation.principal),
    )
    return conversation, spec


def tenant_of(principal: JsonValue) -> str | None:
    """The ``TENANT_LIMITS`` key of ``principal`` (None: no tenant limit, or none set up)."""
    limits = turnkit_settings.TENANT_LIMITS
    if limits is None:
        return None
    tenant = limits.key(principal)
    if tenant is not None and (not isinstance(tenant, str) or not 0 < len(tenant) <= 200):
        raise ConfigurationError(
            f"TURNKIT['TENANT_LIMITS']['key'] returned {tenant!r} for the principal "
            f"{principal!r}; return a non-empty string of at most 200 characters (the tenant "
            "key), or None for no tenant limit on this turn.")
    return tenant


__all__ = ["conversation_spec", "new_claimed_turn", "new_conversation", "new_turn", "tenant_of",
           "turn_options", "turn_spec"]
