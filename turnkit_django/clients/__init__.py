"""Model clients: the protocol, the provider clients, and the default client resolution."""

from __future__ import annotations

import threading

from django.core.signals import setting_changed

from ..conf import turnkit_settings
from ..exceptions import ConfigurationError
from .anthropic import AnthropicClient
from .evaluation import EvaluationRequest, Evaluator, EvaluatorReply
from .openai import OpenAIClient
from .openai_evaluator import OpenAIEvaluator
from .protocol import (
    BaseClient,
    Capability,
    Client,
    ModelRequest,
    ModelResponse,
    ToolSpec,
    Usage,
    supports,
)

_lock = threading.Lock()
_default: Client | None = None


def default_client() -> Client:
    """Return the client named by ``TURNKIT["CLIENT"]`` (a class, factory, path or instance)."""
    global _default
    with _lock:
        if _default is None:
            _default = build_client(turnkit_settings.CLIENT)
        return _default


def build_client(value: object) -> Client:
    """Instantiate a client setting: a client is used as is, a class or factory is called."""
    client = value if isinstance(value, Client) and not isinstance(value, type) else (
        value() if callable(value) else value)
    if not isinstance(client, Client):
        raise ConfigurationError(
            f"TURNKIT['CLIENT'] must be a model client (with provider and complete(request)), "
            f"a class or a factory returning one; got {value!r}"
        )
    return client


def is_test_client(client: object) -> bool:
    """True for a test double of ``turnkit_django.testing`` (or a project subclass of one),
    which answers without calling a model: ``check --deploy`` warns about it (W010)."""
    return any(cls.__module__.startswith("turnkit_django.testing")
               for cls in type(client).__mro__)


def reset_default_client() -> None:
    global _default
    with _lock:
        _default = None


def _settings_changed(*, setting: str, **kwargs: object) -> None:
    if setting == "TURNKIT":
        reset_default_client()


setting_changed.connect(_settings_changed)


__all__ = [
    "AnthropicClient",
    "BaseClient",
    "Capability",
    "Client",
    "EvaluationRequest",
    "Evaluator",
    "EvaluatorReply",
    "ModelRequest",
    "ModelResponse",
    "OpenAIClient",
    "OpenAIEvaluator",
    "ToolSpec",
    "Usage",
    "build_client",
    "default_client",
    "is_test_client",
    "reset_default_client",
    "supports",
]
