"""The media and specialists pages' shell session runs as written, in this process.

Their runnable blocks are titled "python manage.py shell" (the convention of tests/docpages.py);
they use test clients, so they need no network and no subprocess.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import storages

from tests.docpages import SHELL, blocks
from turnkit_django.agents.registry import registered_agents, unregister

DOCS = Path(__file__).resolve().parents[2] / "docs"


def examples(page: str) -> list[str]:
    return [b.code for b in blocks(DOCS / page) if b.title == SHELL]


@pytest.mark.django_db
@pytest.mark.parametrize("page", ["media.md", "specialists.md"])
def test_the_page_examples_run_as_written(page: str, settings: Any, tmp_path: Path) -> None:
    settings.MEDIA_ROOT = str(tmp_path / "media")
    storages._storages.clear()
    blocks = examples(page)
    assert len(blocks) >= 3, f"{page} lost its runnable examples"
    namespace: dict[str, Any] = {"__name__": f"docs.{page}"}
    try:
        for number, block in enumerate(blocks, 1):
            exec(compile(block, f"{page} example {number}", "exec"), namespace)  # noqa: S102
    finally:
        storages._storages.clear()


# Pages whose every Python block is run, or says in its title why not (tests/docpages.py).
CHECKED = ["quickstart.md", "howto/views.md", "howto/orchestration.md", "media.md",
           "howto/integrations.md", "howto/streaming.md"]


@pytest.mark.parametrize("page", CHECKED)
def test_every_python_block_is_run_or_says_why_not(page: str) -> None:
    unmarked = [b.line for b in blocks(DOCS / page) if b.lang == "python" and not b.title]
    assert not unmarked, (f"{page}: the Python blocks at lines {unmarked} are neither run nor "
                          "marked: title them (a file, 'python manage.py shell') or mark them "
                          "(', needs an API key', 'fragment')")


@pytest.mark.django_db
def test_each_orchestration_sample_runs_on_its_own() -> None:
    """Every session of the page runs in a fresh namespace, with a registry of its own."""
    page = "howto/orchestration.md"
    sessions = examples(page)
    assert len(sessions) >= 5, f"{page} lost its runnable examples"
    for number, block in enumerate(sessions, 1):
        before = set(registered_agents())
        namespace: dict[str, Any] = {"__name__": f"docs.{page}"}
        try:
            exec(compile(block, f"{page} example {number}", "exec"), namespace)  # noqa: S102
        finally:
            for name in set(registered_agents()) - before:
                unregister(name)
        if "run" in namespace and hasattr(namespace["run"], "status"):
            assert namespace["run"].status in ("completed", "pending"), (number, namespace["run"])
