"""E2E / chaos tier: real ``celery worker`` processes, Redis and PostgreSQL.

Needs ``TURNKIT_TEST_DATABASE_URL`` and ``TURNKIT_TEST_REDIS_URL`` (``scripts/run-tests.sh e2e``
starts both servers); without them every e2e test is skipped. Tests use
``@pytest.mark.django_db(transaction=True)``: the test process and the workers share the
PostgreSQL test database pytest-django created, and the rows are flushed after each test, once
its workers are stopped (the ``cluster`` fixture depends on ``transactional_db``).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from tests.e2e.harness import Cluster, flush_redis
from tests.e2e.worker_settings import E2E_TURNKIT
from tests.helpers import _disarm_failpoints
from tests.testapp import ledger

__all__ = ["_disarm_failpoints", "cluster", "e2e_settings"]

_HERE = Path(__file__).resolve().parent
_NEEDED = ("TURNKIT_TEST_DATABASE_URL", "TURNKIT_TEST_REDIS_URL")


def skip_without_servers(items: list[pytest.Item], directory: Path, tier: str) -> None:
    """Skip the tests under ``directory`` when the servers' variables are missing."""
    missing = [name for name in _NEEDED if not os.environ.get(name)]
    if not missing:
        return
    skip = pytest.mark.skip(reason=f"{tier} needs {' and '.join(missing)} "
                                   f"(run scripts/run-tests.sh {tier})")
    for item in items:
        if directory in Path(item.path).resolve().parents:
            item.add_marker(skip)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_without_servers(items, _HERE, "e2e")


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[Any]) -> Any:
    report = yield
    if report.when == "call":
        item.stash[_FAILED] = report.failed
    return report


_FAILED = pytest.StashKey[bool]()


@pytest.fixture(autouse=True)
def e2e_settings(settings: Any) -> None:
    """The test process reconciles with the workers' timings (tests/e2e/worker_settings.py)."""
    settings.TURNKIT = dict(E2E_TURNKIT)


@pytest.fixture
def cluster(request: pytest.FixtureRequest, transactional_db: None, tmp_path: Path,
            monkeypatch: pytest.MonkeyPatch) -> Iterator[Cluster]:
    """Workers started on demand (``cluster.start(n)``), always stopped at teardown."""
    assert connection.vendor == "postgresql", "the e2e tier needs PostgreSQL"
    flush_redis()  # no doorbell left over from an earlier test
    group = Cluster(tmp_path, connection.settings_dict["NAME"])
    # The test process writes its own facts (reconcile's events) to the same ledger.
    monkeypatch.setenv(ledger.LEDGER_ENV, str(group.ledger_path))
    monkeypatch.setenv(ledger.GATES_ENV, str(group.gates))
    try:
        yield group
    finally:
        group.shutdown()
        if request.node.stash.get(_FAILED, False):
            print(group.logs())
