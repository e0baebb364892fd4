"""The chat completions wire format of :class:`~turnkit_django.clients.openai.OpenAIClient`.

``OpenAIChat`` (a mixin of the client) turns a :class:`ModelRequest` into the JSON body of
``POST /chat/completions`` (instructions as a ``system`` message, tool calls and results, the
response format, the token limit) and a response body back into a :class:`ModelResponse`
(reasoning, text, refusal, tool calls, structured output, usage and the reported cost).
``usage_from`` and ``reported_cost`` are shared with the evaluator client.
"""

from __future__ import annotations

import json
import uuid
from typing import TYPE_CHECKING, Literal

from ..base.serialization import JsonMapping, JsonObject
from ..exceptions import ModelError
from ..messages import (
    ChatMessage,
    DataPart,
    Part,
    ProviderPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
)
from . import _wire
from ._http import (
    content_text,
    error_message,
    json_text,
    member,
    members,
    parse_arguments,
    parse_output,
    provider_error,
    resolve_model,
    schema_name,
    text_or_none,
)
from .protocol import ModelRequest, ModelResponse, Usage, json_int

PROVIDER = "openai"
# finish_reason -> the stop reasons the rest of the package uses (Anthropic's names).
STOP_REASONS = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "refusal",
}


class OpenAIChat:
    """Mixin of ``OpenAIClient``: ``build_request`` and ``parse_response``."""

    model: str | None
    max_tokens: int | None
    max_tokens_field: Literal["max_completion_tokens", "max_tokens"]
    strict_output: bool

    if TYPE_CHECKING:
        def _label(self) -> str: ...

        def _secrets(self) -> tuple[str, ...]: ...

    def build_request(self, request: ModelRequest) -> _wire.OpenAIChatBody:
        """Return the JSON body of the chat completions request for ``request``."""
        body: _wire.OpenAIChatBody = {
            "model": resolve_model(self.model, request, PROVIDER),
            "messages": self._messages(request),
        }
        if request.tools:
            body["tools"] = [
                {
                    "type": "function",
                    "function": {
                        "name": t.name,
                        "description": t.description,
                        "parameters": t.parameters,
                    },
                }
                for t in request.tools
            ]
        if request.output_schema is not None:
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {
                    "name": schema_name(request.output_schema),
                    "schema": request.output_schema,
                    "strict": self.strict_output,
                },
            }
        max_tokens = request.max_tokens or self.max_tokens
        if max_tokens:
            body[self.max_tokens_field] = max_tokens
        effort = (request.thinking or {}).get("effort")
        if effort:
            body["reasoning_effort"] = effort
        return body

    # -- transcript translation --------------------------------------------------------------

    def _messages(self, request: ModelRequest) -> list[_wire.OpenAIMessage]:
        out: list[_wire.OpenAIMessage] = []
        if request.instructions:
            out.append({"role": "system", "content": request.instructions})
        for message in request.messages:
            if message.role == "tool":
                out.extend(
                    {
                        "role": "tool",
                        "tool_call_id": r.tool_call_id,
                        "content": json_text(r.content),
                    }
                    for r in message.tool_results
                )
            else:
                entry = (self._assistant_message(message) if message.role == "assistant"
                         else self._user_message(message))
                if entry is not None:
                    out.append(entry)
        return out

    @staticmethod
    def _user_message(message: ChatMessage) -> _wire.OpenAIUserMessage | None:
        text = _text(message.parts)
        blocks = [dict(p.data) for p in message.parts
                  if isinstance(p, ProviderPart) and p.provider == PROVIDER]
        if not blocks:
            return {"role": "user", "content": text} if text else None
        content: list[_wire.OpenAITextPart | JsonObject] = (
            [{"type": "text", "text": text}] if text else [])
        return {"role": "user", "content": [*content, *blocks]}

    @staticmethod
    def _assistant_message(message: ChatMessage) -> _wire.OpenAIAssistantMessage | None:
        text = _text(message.parts)
        calls: list[_wire.OpenAIToolCall] = [
            {
                "id": call.id,
                "type": "function",
                "function": {
                    "name": call.name,
                    "arguments": call.raw_arguments
                    if call.raw_arguments is not None
                    else json.dumps(call.arguments, ensure_ascii=False),
                },
            }
            for call in message.tool_calls
        ]
        if not text and not calls:
            return None
        entry: _wire.OpenAIAssistantMessage = {"role": "assistant", "content": text or None}
        if calls:
            entry["tool_calls"] = calls
        return entry

    # -- the response ------------------------------------------------------------------------

    def parse_response(self, data: JsonObject, request: ModelRequest) -> ModelResponse:
        """Translate a chat completions response body into a :class:`ModelResponse`."""
        choices = members(data.get("choices")) if isinstance(data, dict) else []
        if not choices:
            kind, text = provider_error(data)
            raise ModelError(
                error_message(self._label(), None, kind, text or "no choices", self._secrets())
            )
        choice = choices[0]
        message = member(choice, "message")
        parts: list[Part] = []
        reasoning = message.get("reasoning_content") or message.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            parts.append(ThinkingPart(text=reasoning, provider=PROVIDER))
        content = content_text(message.get("content"))
        if content:
            parts.append(TextPart(content))
        refusal = text_or_none(message.get("refusal"))
        if refusal:
            parts.append(TextPart(refusal))
        for call in members(message.get("tool_calls")):
            function = member(call, "function")
            raw = function.get("arguments")
            if isinstance(raw, dict):  # a few servers send an object instead of a string
                arguments, raw_text = raw, None
            else:
                arguments, raw_text = parse_arguments(
                    raw if isinstance(raw, str) or raw is None else json_text(raw))
            parts.append(
                ToolCallPart(
                    id=str(call.get("id") or f"call_{uuid.uuid4().hex[:24]}"),
                    name=str(function.get("name")),
                    arguments=arguments,
                    raw_arguments=raw_text,
                )
            )
        if request.output_schema is not None and content and not refusal:
            ok, value = parse_output(content)
            if ok:
                parts.append(DataPart(value))
        finish = text_or_none(choice.get("finish_reason"))
        return ModelResponse(
            parts=tuple(parts),
            usage=usage_from(member(data, "usage")),
            model=str(data.get("model") or request.model),
            stop_reason="refusal" if refusal else STOP_REASONS.get(finish or "", finish),
            provider=PROVIDER,
            reported_cost=reported_cost(member(data, "usage")),
            usage_reported=isinstance(data.get("usage"), dict),
        )


def _text(parts: tuple[Part, ...]) -> str:
    """Return the text of a message: its text parts, or else its data as JSON."""
    text = "".join(p.text for p in parts if isinstance(p, TextPart))
    if text:
        return text
    return "".join(json_text(p.data) for p in parts if isinstance(p, DataPart))


def usage_from(usage: JsonMapping) -> Usage:
    details = member(usage, "prompt_tokens_details")
    cached = json_int(details.get("cached_tokens"))
    written = json_int(details.get("cache_write_tokens"))
    prompt = json_int(usage.get("prompt_tokens"))
    return Usage(
        input_tokens=max(prompt - cached - written, 0),
        output_tokens=json_int(usage.get("completion_tokens")),
        cache_read_tokens=cached,
        cache_write_tokens=written,
        thinking_tokens=json_int(  # part of the output
            member(usage, "completion_tokens_details").get("reasoning_tokens")),
    )


def reported_cost(usage: JsonMapping) -> str | None:
    cost = usage.get("cost")  # OpenRouter reports what it charged
    if isinstance(cost, int | float) and not isinstance(cost, bool):
        return str(cost)
    return None


__all__ = ["STOP_REASONS", "OpenAIChat", "reported_cost", "usage_from"]
