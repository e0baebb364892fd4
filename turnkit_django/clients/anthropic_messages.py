"""The Messages API wire format of :class:`~turnkit_django.clients.anthropic.AnthropicClient`.

``AnthropicMessages`` (a mixin of the client) turns a :class:`ModelRequest` into the JSON body of
a Messages API request (system blocks with their cache markers, thinking options, tools, the
output format, the transcript as merged ``user`` / ``assistant`` messages) and a response body
back into a :class:`ModelResponse` (text, thinking, tool calls, provider blocks, structured output
and usage).
"""

from __future__ import annotations

from typing import Literal

from ..base.serialization import JsonObject, JsonValue
from ..exceptions import ModelError
from ..messages import (
    ChatMessage,
    DataPart,
    Part,
    ProviderPart,
    TextPart,
    ThinkingPart,
    ToolCallPart,
    ToolResultPart,
)
from . import _wire
from ._http import json_text, member, members, parse_output, resolve_model, text_or_none
from .protocol import ModelRequest, ModelResponse, Usage, json_int

PROVIDER = "anthropic"
_EPHEMERAL: _wire.CacheControl = {"type": "ephemeral"}
_THINKING_KEYS = frozenset({"budget", "effort", "display", "adaptive"})


class AnthropicMessages:
    """Mixin of ``AnthropicClient``: ``build_request`` and ``parse_response``."""

    model: str | None
    max_tokens: int
    prompt_caching: bool

    def build_request(self, request: ModelRequest) -> _wire.AnthropicBody:
        """Return the JSON body of the Messages API request for ``request``."""
        thinking, effort = self._thinking(request.thinking)
        max_tokens = request.max_tokens or self.max_tokens
        budget = (thinking or {}).get("budget_tokens")
        if isinstance(budget, int) and budget >= max_tokens:
            # Thinking tokens count toward max_tokens, which must exceed the budget.
            max_tokens = budget + self.max_tokens
        body: _wire.AnthropicBody = {
            "model": resolve_model(self.model, request, PROVIDER),
            "max_tokens": max_tokens,
            "messages": self._messages(request.messages),
        }
        system = self._system(request)
        if system:
            body["system"] = system
        if request.tools:
            body["tools"] = [
                {"name": t.name, "description": t.description, "input_schema": t.parameters}
                for t in request.tools
            ]
        if thinking:
            body["thinking"] = thinking
        output_config: _wire.AnthropicOutputConfig = {}
        if effort:
            output_config["effort"] = effort
        if request.output_schema is not None:
            output_config["format"] = {"type": "json_schema", "schema": request.output_schema}
        if output_config:
            body["output_config"] = output_config
        if self.prompt_caching:
            body["cache_control"] = {**_EPHEMERAL}
        return body

    def _system(self, request: ModelRequest) -> list[_wire.AnthropicText]:
        blocks: list[_wire.AnthropicText] = []
        if request.stable_instructions:
            block: _wire.AnthropicText = {"type": "text", "text": request.stable_instructions}
            if self.prompt_caching:
                block["cache_control"] = {**_EPHEMERAL}
            blocks.append(block)
        if request.dynamic_instructions:
            blocks.append({"type": "text", "text": request.dynamic_instructions})
        return blocks

    @staticmethod
    def _thinking(config: JsonObject | None) -> tuple[JsonObject | None, JsonValue]:
        """Return the ``thinking`` parameter and the effort for a thinking configuration.

        ``{"budget": N}`` is manual extended thinking; ``{"adaptive": True}`` is adaptive
        thinking; ``{"effort": "low"}`` sets ``output_config.effort``; ``display`` is passed on.
        A dict with ``type`` is the wire form and is sent as it is (``effort`` aside).
        """
        if not config:
            return None, None
        effort = config.get("effort")
        if "type" in config:
            return {k: v for k, v in config.items() if k != "effort"}, effort
        unknown = set(config) - _THINKING_KEYS
        if unknown:
            raise ModelError(
                f"unknown thinking options {sorted(unknown, key=repr)} for Anthropic; use budget, "
                "adaptive, effort, display, or the API's own form with a 'type' key"
            )
        thinking: JsonObject | None = None
        budget = json_int(config.get("budget"))
        if budget:
            thinking = {"type": "enabled", "budget_tokens": budget}
        elif config.get("adaptive"):
            thinking = {"type": "adaptive"}
        if thinking is not None and config.get("display"):
            thinking["display"] = config["display"]
        return thinking, effort

    # -- transcript translation --------------------------------------------------------------

    def _messages(self, messages: tuple[ChatMessage, ...]) -> list[_wire.AnthropicMessage]:
        out: list[_wire.AnthropicMessage] = []
        for message in messages:
            role: Literal["user", "assistant"]
            if message.role == "assistant":
                role, blocks = "assistant", self._assistant_blocks(message.parts)
            else:
                role, blocks = "user", self._user_blocks(message.parts)
            if not blocks:
                continue
            if out and out[-1]["role"] == role:
                out[-1]["content"].extend(blocks)
            else:
                out.append({"role": role, "content": blocks})
        for entry in out:
            if entry["role"] == "user":
                # Tool results must lead the user message that follows the tool calls.
                entry["content"].sort(key=lambda block: block.get("type") != "tool_result")
        return out

    @staticmethod
    def _user_blocks(parts: tuple[Part, ...]) -> list[_wire.AnthropicBlock]:
        blocks: list[_wire.AnthropicBlock] = []
        for part in parts:
            if isinstance(part, ToolResultPart):
                block: _wire.AnthropicToolResult = {
                    "type": "tool_result",
                    "tool_use_id": part.tool_call_id,
                    "content": json_text(part.content),
                }
                if part.is_error:
                    block["is_error"] = True
                blocks.append(block)
            elif isinstance(part, TextPart | DataPart):
                text = part.text if isinstance(part, TextPart) else json_text(part.data)
                if text:
                    blocks.append({"type": "text", "text": text})
            elif isinstance(part, ProviderPart) and part.provider == PROVIDER:
                blocks.append(dict(part.data))
        return blocks

    @staticmethod
    def _assistant_blocks(parts: tuple[Part, ...]) -> list[_wire.AnthropicBlock]:
        # A structured answer keeps its JSON text; the parsed DataPart is sent only without it.
        has_text = any(isinstance(p, TextPart) and p.text for p in parts)
        blocks: list[_wire.AnthropicBlock] = []
        for part in parts:
            if isinstance(part, ThinkingPart):
                if part.provider != PROVIDER or not part.signature:
                    continue  # another provider's reasoning, or nothing that can be verified
                if part.redacted:
                    blocks.append({"type": "redacted_thinking", "data": part.signature})
                else:
                    blocks.append(
                        {"type": "thinking", "thinking": part.text, "signature": part.signature}
                    )
            elif isinstance(part, TextPart):
                if part.text:
                    blocks.append({"type": "text", "text": part.text})
            elif isinstance(part, ToolCallPart):
                blocks.append(
                    {"type": "tool_use", "id": part.id, "name": part.name, "input": part.arguments}
                )
            elif isinstance(part, DataPart):
                if not has_text:
                    blocks.append({"type": "text", "text": json_text(part.data)})
            elif isinstance(part, ProviderPart) and part.provider == PROVIDER:
                blocks.append(dict(part.data))
        return blocks

    # -- the response ------------------------------------------------------------------------

    def parse_response(self, data: JsonObject, request: ModelRequest) -> ModelResponse:
        """Translate a Messages API response body into a :class:`ModelResponse`."""
        parts: list[Part] = []
        texts: list[str] = []
        for block in members(data.get("content")):
            kind = block.get("type")
            if kind == "text":
                texts.append(text_or_none(block.get("text")) or "")
                parts.append(TextPart(texts[-1]))
            elif kind == "thinking":
                parts.append(
                    ThinkingPart(
                        text=text_or_none(block.get("thinking")) or "",
                        signature=text_or_none(block.get("signature")),
                        provider=PROVIDER,
                    )
                )
            elif kind == "redacted_thinking":
                signature = text_or_none(block.get("data"))
                parts.append(
                    ThinkingPart(text="", signature=signature, provider=PROVIDER, redacted=True))
            elif kind == "tool_use":  # a missing id stays empty: the runtime names the call
                arguments = block.get("input")
                parts.append(ToolCallPart(
                    id=str(block.get("id") or ""), name=str(block.get("name") or ""),
                    arguments=arguments if isinstance(arguments, dict) else {},
                    raw_arguments=None if isinstance(arguments, dict) else json_text(arguments)))
            else:
                parts.append(ProviderPart(provider=PROVIDER, data=block))
        if request.output_schema is not None and texts:
            ok, value = parse_output("".join(texts))
            if ok:
                parts.append(DataPart(value))
        usage = member(data, "usage")
        return ModelResponse(
            parts=tuple(parts),
            usage=Usage(
                input_tokens=json_int(usage.get("input_tokens")),
                output_tokens=json_int(usage.get("output_tokens")),
                cache_read_tokens=json_int(usage.get("cache_read_input_tokens")),
                cache_write_tokens=json_int(usage.get("cache_creation_input_tokens")),
            ),
            model=str(data.get("model") or request.model),
            stop_reason=text_or_none(data.get("stop_reason")),
            provider=PROVIDER,
            usage_reported=isinstance(data.get("usage"), dict),
        )


__all__ = ["AnthropicMessages"]
