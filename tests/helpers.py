"""Shared test helpers: agents registered for one test, failpoint cleanup."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from turnkit_django import failpoints
from turnkit_django.registry import register, unregister


@pytest.fixture
def registered() -> Iterator[Any]:
    """Register agents for the duration of one test: ``registered(agent)`` returns it."""
    names: list[str] = []

    def add(agent: Any) -> Any:
        register(agent)
        names.append(agent.name)
        names.extend(a.name for a in agent.reachable_agents())
        return agent

    yield add
    for name in names:
        unregister(name)


@pytest.fixture(autouse=True)
def _disarm_failpoints() -> Iterator[None]:
    yield
    failpoints.disarm_all()
