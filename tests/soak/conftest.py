"""Soak tier: the nemesis soak on real ``celery worker`` processes, Redis and PostgreSQL.

Needs the e2e tier's servers (``scripts/run-tests.sh soak`` starts them); without them the soak is
skipped. The ``cluster`` fixture is the e2e tier's (tests/e2e/conftest.py).
"""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import cluster, pytest_runtest_makereport, skip_without_servers
from tests.e2e.harness import REPO
from tests.helpers import _disarm_failpoints
from tests.soak.worker_settings import SOAK_TURNKIT

__all__ = ["_disarm_failpoints", "cluster", "pytest_runtest_makereport", "soak_settings",
           "tmp_path"]

_HERE = Path(__file__).resolve().parent
RUN_DIR = REPO / "build" / "soak"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_without_servers(items, _HERE, "soak")


@pytest.fixture(autouse=True)
def soak_settings(settings: Any) -> None:
    """The test process reconciles with the workers' timings (tests/soak/worker_settings.py)."""
    settings.TURNKIT = dict(SOAK_TURNKIT)


@pytest.fixture
def tmp_path() -> Path:
    """The cluster's directory (worker logs, ledger, a dump on failure): build/soak/, emptied
    at the start of a run and kept after it."""
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    return RUN_DIR
