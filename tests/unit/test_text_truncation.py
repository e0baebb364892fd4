"""A text cut at a byte limit is cut on a character boundary: ``read_file`` (and the GitHub
tool's ``file``) cut the bytes and decoded them with replacement, so a character split by the
limit reached the model as U+FFFD."""

from __future__ import annotations

import base64
from pathlib import Path
from typing import Any

import httpx
import pytest

from turnkit_django.tools import ReadFile
from turnkit_django.tools.github import GitHubTool

TEXT = "naïve café 日本語 😀 " * 50  # 1-, 2-, 3- and 4-byte characters


def _cut_everywhere() -> list[int]:
    return list(range(1, 40))


@pytest.mark.parametrize("limit", _cut_everywhere())
def test_read_file_cuts_on_a_character_boundary(tmp_path: Path, limit: int) -> None:
    (tmp_path / "text.md").write_text(TEXT, encoding="utf-8")
    reader = ReadFile(tmp_path, max_bytes=limit)
    read = reader.call(None, reader.validate({"path": "text.md"}))  # type: ignore[arg-type]
    assert read["truncated"] is True
    assert "\ufffd" not in read["content"] and TEXT.startswith(read["content"])
    assert limit - 3 <= len(read["content"].encode()) <= limit


def test_bytes_that_are_not_utf8_are_still_replaced_and_a_whole_file_is_whole(
        tmp_path: Path) -> None:
    (tmp_path / "latin.txt").write_bytes("café".encode("latin-1") + b" ok")
    (tmp_path / "text.md").write_text(TEXT, encoding="utf-8")
    reader = ReadFile(tmp_path, max_bytes=6)
    assert reader.call(None, reader.validate({"path": "latin.txt"}))[  # type: ignore[arg-type]
        "content"] == "caf\ufffd o"
    whole = ReadFile(tmp_path)
    assert whole.call(None, whole.validate({"path": "text.md"}))[  # type: ignore[arg-type]
        "content"] == TEXT


@pytest.mark.parametrize("limit", _cut_everywhere())
def test_the_github_file_cuts_on_a_character_boundary(limit: int) -> None:
    def answer(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"type": "file", "path": "t.md", "size": 1,
                                         "content": base64.b64encode(TEXT.encode()).decode()})

    tool_: Any = GitHubTool("django/django", transport=httpx.MockTransport(answer),
                            max_bytes=limit)
    data = tool_.call(None, tool_.validate({"operation": "file", "path": "t.md"}))["data"]
    assert data["truncated"] is True
    assert "\ufffd" not in data["content"] and TEXT.startswith(data["content"])
