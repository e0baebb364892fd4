"""The agent registry: workers rebuild turns by agent name, so every process registers the same."""

from __future__ import annotations

import threading
from typing import TypeVar

from django.utils.module_loading import autodiscover_modules

from ..exceptions import ConfigurationError
from .definition import AgentDefinition

A = TypeVar("A", bound=AgentDefinition)

_lock = threading.RLock()
_agents: dict[str, AgentDefinition] = {}


def register(agent: A) -> A:
    """Add ``agent`` and its sub-agents to the registry and return it.

    Registering the same object twice is harmless; another definition under a taken name raises
    :class:`ConfigurationError`.
    """
    if not isinstance(agent, AgentDefinition):
        raise TypeError(f"register() takes an Agent (register(Agent(name=..., ...))), got "
                        f"{agent!r:.60}")
    with _lock:
        items: list[AgentDefinition] = [agent, *agent.reachable_agents()]
        for item in items:
            current = _agents.get(item.name)
            if current is not None and current is not item and current.fingerprint() != (
                item.fingerprint()
            ):
                raise ConfigurationError(
                    f"an agent named {item.name!r} is already registered with a different "
                    "definition; agent names must be unique in a project"
                )
            _agents.setdefault(item.name, item)
    return agent


def get_agent(name: str) -> AgentDefinition:
    """Return the registered agent ``name`` or raise ConfigurationError with what to do."""
    with _lock:
        agent = _agents.get(name)
    if agent is None:
        raise ConfigurationError(
            f"no agent named {name!r} is registered in this process; define it in an app's "
            "agents.py and pass it to turnkit_django.register() so every web, worker and beat "
            "process registers it at startup"
        )
    return agent


def registered_agents() -> dict[str, AgentDefinition]:
    with _lock:
        return dict(_agents)


def unregister(name: str) -> None:
    """Remove an agent (for tests)."""
    with _lock:
        _agents.pop(name, None)


def autodiscover() -> None:
    """Import ``<app>.agents`` for every installed app."""
    autodiscover_modules("agents")
