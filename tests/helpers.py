"""Shared test helpers: agents registered for one test, failpoint cleanup, a media root."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import storages

from tests.dispatch import clear, recorded
from turnkit_django import services
from turnkit_django.agents.registry import register, unregister
from turnkit_django.base import failpoints


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


def _uses_database(request: pytest.FixtureRequest) -> bool:
    """Whether the test uses the database; if so, make sure it is set up before the caller.

    Requesting ``db`` here orders the database fixture before the calling fixture, so the
    caller's teardown (the check) runs before the test's transaction is rolled back or flushed,
    whatever order pytest chose for autouse fixtures.
    """
    names = request.fixturenames
    uses = request.node.get_closest_marker("django_db") is not None or any(
        name in names for name in ("db", "transactional_db", "django_db_reset_sequences")
    )
    if uses:
        request.getfixturevalue("db")
    return uses


@pytest.fixture
def invariants(request: pytest.FixtureRequest) -> Iterator[Any]:
    """Check the invariants on the data the test leaves behind; yields ``assert_invariants``."""
    from turnkit_django.testing.verify import assert_invariants

    uses_database = _uses_database(request)
    yield assert_invariants
    if uses_database:
        assert_invariants()


@pytest.fixture(autouse=True)
def verify_after_test(request: pytest.FixtureRequest) -> Iterator[None]:
    """Autouse where imported (tier conftests): check I1-I4, I6, I7 after each test.

    A test that builds corrupted data on purpose opts out with ``@pytest.mark.corrupts_data``.
    """
    check = _uses_database(request) and request.node.get_closest_marker("corrupts_data") is None
    yield
    if check:
        from turnkit_django.testing.verify import assert_invariants

        assert_invariants()


def expire_lease(turn_id: str, *, ago: Any = None) -> None:
    """Make the claim on ``turn_id`` look dead: its last heartbeat an hour (or ``ago``) old."""
    from datetime import timedelta

    from django.utils import timezone

    from turnkit_django.models import Lease

    Lease.objects.filter(turn_id=turn_id).update(
        heartbeat_at=timezone.now() - (ago or timedelta(hours=1)))


def crash(turn_id: str, point: str) -> None:
    """Run a submitted turn until it dies at failpoint ``point``; leave its lease expired."""


    from turnkit_django import services
    from turnkit_django.models import Turn

    failpoints.arm(point)
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(turn_id, kind="test")
    assert Turn.objects.get(pk=turn_id).status == "running"
    expire_lease(turn_id)


def crash_and_resume(turn_id: str, point: str) -> None:
    """Run a submitted turn until it dies at failpoint ``point``, reconcile it, run it again."""


    from turnkit_django import reconcile, services
    from turnkit_django.models import Turn

    failpoints.arm(point)
    with pytest.raises(failpoints.SimulatedCrash):
        services.run_turn(turn_id, kind="test")
    assert Turn.objects.get(pk=turn_id).status == "running"
    expire_lease(turn_id)
    assert turn_id in reconcile().recovered
    assert services.run_turn(turn_id, kind="test")


@pytest.fixture
def media_root(settings: Any, tmp_path: Path) -> Iterator[Path]:
    """Generated images go to the default storage under the test's tmp dir, at ``/media/``."""
    settings.MEDIA_ROOT = str(tmp_path / "media")
    settings.MEDIA_URL = "/media/"
    storages._storages.clear()  # rebuilt with the settings above
    yield tmp_path / "media"
    storages._storages.clear()


def run_all(capture: Any, rounds: int = 20) -> None:
    """Run what was dispatched, and what that dispatched, each turn in its own commit scope
    (``capture`` is ``django_capture_on_commit_callbacks``), until nothing is left."""
    for _ in range(rounds):
        pending = recorded()
        clear()
        if not pending:
            return
        for turn_id in dict.fromkeys(pending):
            with capture(execute=True):
                services.run_turn(turn_id)
    raise AssertionError(f"still dispatching after {rounds} rounds")
