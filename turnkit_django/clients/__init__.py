"""Model clients: the protocol, the provider clients, and the default client resolution."""

from __future__ import annotations

import threading
from typing import TYPE_CHECKING, Any

from .base import BaseClient, Client, ModelRequest, ModelResponse, ToolSpec, Usage

if TYPE_CHECKING:
    from .anthropic import AnthropicClient
    from .openai import OpenAIClient

_lock = threading.Lock()
_default: Client | None = None


def default_client() -> Client:
    """Return the client named by ``TURNKIT["CLIENT"]`` (a class, factory, path or instance)."""
    global _default
    with _lock:
        if _default is None:
            from ..conf import turnkit_settings

            _default = build_client(turnkit_settings.CLIENT)
        return _default


def build_client(value: Any) -> Client:
    """Instantiate a client setting: an instance is used as is, a class or factory is called."""
    from ..exceptions import ConfigurationError

    client = value() if callable(value) and not hasattr(value, "complete") else value
    if isinstance(value, type):
        client = value()
    if not hasattr(client, "complete"):
        raise ConfigurationError(
            f"TURNKIT['CLIENT'] must be a client (an object with complete(request)); got {value!r}"
        )
    return client  # type: ignore[no-any-return,unused-ignore]


def reset_default_client() -> None:
    global _default
    with _lock:
        _default = None


def __getattr__(name: str) -> Any:
    # Provider clients import their SDKs lazily so the package works without the extras.
    if name == "AnthropicClient":
        from .anthropic import AnthropicClient

        return AnthropicClient
    if name == "OpenAIClient":
        from .openai import OpenAIClient

        return OpenAIClient
    raise AttributeError(name)


__all__ = [
    "AnthropicClient",
    "BaseClient",
    "Client",
    "ModelRequest",
    "ModelResponse",
    "OpenAIClient",
    "ToolSpec",
    "Usage",
    "build_client",
    "default_client",
    "reset_default_client",
]
