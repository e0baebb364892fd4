"""The examples of the media and specialists pages run as written (blocks marked "runs as is")."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from django.core.files.storage import storages

DOCS = Path(__file__).resolve().parents[2] / "docs"
MARK = "# runs as is"
_BLOCK = re.compile(r"```python\n(.*?)```", re.DOTALL)


def examples(page: str) -> list[str]:
    return [b for b in _BLOCK.findall((DOCS / page).read_text()) if b.startswith(MARK)]


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
