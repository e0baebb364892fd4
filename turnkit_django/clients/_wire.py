"""The request bodies the provider clients send, named: Anthropic Messages, OpenAI chat.

Only what this package builds is named here. What it passes through as it came (a stored
provider block replayed verbatim, a user's JSON schema or provider parameters) stays
:data:`~turnkit_django.base.serialization.JsonObject`, and so do provider answers: they are
read with the narrowing helpers of :mod:`turnkit_django.clients._http`.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypeAlias, TypedDict

from ..base.serialization import JsonObject, JsonValue


class CacheControl(TypedDict):
    type: Literal["ephemeral"]


class JsonSchemaFormat(TypedDict):
    type: Literal["json_schema"]
    schema: JsonObject


# --------------------------------------------------------------------------- Anthropic Messages


class AnthropicText(TypedDict):
    type: Literal["text"]
    text: str
    cache_control: NotRequired[CacheControl]


class AnthropicToolResult(TypedDict):
    type: Literal["tool_result"]
    tool_use_id: str
    content: str
    is_error: NotRequired[bool]


class AnthropicThinking(TypedDict):
    type: Literal["thinking"]
    thinking: str
    signature: str


class AnthropicRedactedThinking(TypedDict):
    type: Literal["redacted_thinking"]
    data: str


class AnthropicToolUse(TypedDict):
    type: Literal["tool_use"]
    id: str
    name: str
    input: JsonObject


#: A content block; a :data:`JsonObject` is a block of this provider replayed as it came.
AnthropicBlock: TypeAlias = (AnthropicText | AnthropicToolResult | AnthropicThinking
                             | AnthropicRedactedThinking | AnthropicToolUse | JsonObject)


class AnthropicMessage(TypedDict):
    role: Literal["user", "assistant"]
    content: list[AnthropicBlock]


class AnthropicTool(TypedDict):
    name: str
    description: str
    input_schema: JsonObject


class AnthropicOutputConfig(TypedDict, total=False):
    effort: JsonValue
    format: JsonSchemaFormat


class AnthropicBody(TypedDict):
    """The JSON body of ``POST /v1/messages``."""

    model: str
    max_tokens: int
    messages: list[AnthropicMessage]
    system: NotRequired[list[AnthropicText]]
    tools: NotRequired[list[AnthropicTool]]
    #: ``{"type": "enabled", "budget_tokens": N}``, ``{"type": "adaptive"}``, or the API's own
    #: form as the agent gave it.
    thinking: NotRequired[JsonObject]
    output_config: NotRequired[AnthropicOutputConfig]
    cache_control: NotRequired[CacheControl]


# --------------------------------------------------------------------------- OpenAI chat


class OpenAIFunction(TypedDict):
    name: str
    description: str
    parameters: JsonObject


class OpenAITool(TypedDict):
    type: Literal["function"]
    function: OpenAIFunction


class OpenAIJsonSchema(TypedDict):
    name: str
    schema: JsonObject
    strict: bool


class OpenAIResponseFormat(TypedDict):
    type: Literal["json_schema"]
    json_schema: OpenAIJsonSchema


class OpenAITextPart(TypedDict):
    type: Literal["text"]
    text: str


class OpenAICalledFunction(TypedDict):
    name: str
    arguments: str


class OpenAIToolCall(TypedDict):
    id: str
    type: Literal["function"]
    function: OpenAICalledFunction


class OpenAISystemMessage(TypedDict):
    role: Literal["system"]
    content: str


class OpenAIUserMessage(TypedDict):
    role: Literal["user"]
    #: Text, or content parts: the text first, then this provider's parts (images, files).
    content: str | list[OpenAITextPart | JsonObject]


class OpenAIAssistantMessage(TypedDict):
    role: Literal["assistant"]
    content: str | None
    tool_calls: NotRequired[list[OpenAIToolCall]]


class OpenAIToolMessage(TypedDict):
    role: Literal["tool"]
    tool_call_id: str
    content: str


OpenAIMessage: TypeAlias = (OpenAISystemMessage | OpenAIUserMessage | OpenAIAssistantMessage
                            | OpenAIToolMessage)


class OpenAIChatBody(TypedDict):
    """The JSON body of ``POST /chat/completions`` (and the evaluator's, without tools)."""

    model: str
    messages: list[OpenAIMessage]
    tools: NotRequired[list[OpenAITool]]
    response_format: NotRequired[OpenAIResponseFormat]
    max_completion_tokens: NotRequired[int]
    max_tokens: NotRequired[int]
    reasoning_effort: NotRequired[JsonValue]
