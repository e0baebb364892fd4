"""Soak tier: the nemesis soak on real ``celery worker`` processes, Redis and PostgreSQL.

Needs the e2e tier's servers (``scripts/run-tests.sh soak`` starts them) and ``SOAK_SECONDS``;
without them the soak is skipped, so a bare ``pytest`` never runs it. The ``cluster`` fixture
and the timings (tests/e2e/worker_settings.py) are the e2e tier's.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from tests.e2e.conftest import (
    cluster,
    e2e_settings,
    pytest_runtest_makereport,
    skip_without_servers,
)
from tests.e2e.harness import REPO
from tests.helpers import _disarm_failpoints

__all__ = ["_disarm_failpoints", "cluster", "e2e_settings", "pytest_runtest_makereport",
           "tmp_path"]

_HERE = Path(__file__).resolve().parent
RUN_DIR = REPO / "build" / "soak"


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    skip_without_servers(items, _HERE, "soak")
    if os.environ.get("SOAK_SECONDS"):
        return
    skip = pytest.mark.skip(reason="the soak runs only when SOAK_SECONDS is set (make soak)")
    for item in items:
        if _HERE in Path(item.path).resolve().parents:
            item.add_marker(skip)


@pytest.fixture
def tmp_path() -> Path:
    """The cluster's directory (worker logs, ledger, a dump on failure): build/soak/, emptied
    at the start of a run and kept after it."""
    shutil.rmtree(RUN_DIR, ignore_errors=True)
    RUN_DIR.mkdir(parents=True)
    return RUN_DIR
