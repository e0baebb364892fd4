"""Root conftest: tag every test with its tier marker from the directory it lives in.

Tiers (see pyproject.toml markers): tests/unit -> unit, tests/integration -> integration,
tests/concurrency -> concurrency, tests/e2e -> e2e, tests/browser -> browser, tests/soak -> soak.
Fixtures belong in the tier conftests.
"""

from __future__ import annotations

from pathlib import Path

import pytest

_TESTS_DIR = Path(__file__).resolve().parent
_TIERS = frozenset({"unit", "integration", "concurrency", "e2e", "browser", "soak"})


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Add the tier marker named by the test's first directory under tests/."""
    for item in items:
        try:
            parts = Path(item.path).resolve().relative_to(_TESTS_DIR).parts
        except ValueError:
            continue
        if len(parts) > 1 and parts[0] in _TIERS:
            item.add_marker(getattr(pytest.mark, parts[0]))
