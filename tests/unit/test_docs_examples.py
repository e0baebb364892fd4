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
