"""Bad input to the file and GitHub tools: configuration mistakes raise ``ConfigurationError``
when the tool is built; model-supplied paths that the operating system refuses, and special
files, become a readable ``ToolError`` that names no server path and never blocks the worker."""

from __future__ import annotations

import os
import signal
from pathlib import Path
from typing import Any

import pytest

from turnkit_django import ToolError
from turnkit_django.exceptions import ConfigurationError
from turnkit_django.tools import ReadFile
from turnkit_django.tools.github import GitHubTool

TOKEN = "ghp_unitTestToken0123456789abcdefABCDEF"


def read(reader: ReadFile, path: str) -> Any:
    return reader.call(None, reader.validate({"path": path}))  # type: ignore[arg-type]


@pytest.mark.parametrize("path", ["a" * 300, "a/" * 3000, ("b" * 200 + "/") * 30])
def test_a_path_the_system_refuses_is_a_tool_error_without_the_root(tmp_path: Path,
                                                                   path: str) -> None:
    with pytest.raises(ToolError) as caught:
        read(ReadFile(tmp_path), path)
    assert "not a usable path" in str(caught.value)
    assert str(tmp_path) not in str(caught.value)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="named pipes")
def test_a_named_pipe_is_refused_instead_of_blocking_the_worker(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")

    def blocked(*_: object) -> None:
        raise AssertionError("reading the named pipe blocked")

    previous = signal.signal(signal.SIGALRM, blocked)
    signal.alarm(3)
    try:
        with pytest.raises(ToolError, match="not a regular file"):
            read(ReadFile(tmp_path), "pipe")
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)


@pytest.mark.parametrize(("root", "options", "message"), [
    (5, {}, "root must be a directory path"),
    ("docs\x00", {}, "root must be a directory path"),
    (None, {}, "root must be a directory path"),
    (".", {"max_bytes": "100"}, "max_bytes must be a whole number above 0"),
    (".", {"max_bytes": True}, "max_bytes must be a whole number above 0"),
    (".", {"max_entries": 2.5}, "max_entries must be a whole number above 0"),
    (".", {"max_entries": 0}, "max_entries must be a whole number above 0"),
])
def test_read_file_refuses_bad_options_when_it_is_built(root: Any, options: dict[str, Any],
                                                        message: str) -> None:
    with pytest.raises(ConfigurationError, match=message):
        ReadFile(root, **options)


@pytest.mark.parametrize(("options", "message"), [
    ({"token": 123}, "token must be a str"),
    ({"token": b"ghp_bytes"}, "token must be a str"),
    ({"token": TOKEN + "\n"}, "token has whitespace or control characters"),
    ({"token": "ghp abc def"}, "token has whitespace or control characters"),
    ({"api_url": 5}, "api_url must be a plain https:// URL"),
    ({"web_url": None}, "web_url must be a plain https:// URL"),
    ({"per_page": 0}, "per_page must be a whole number from 1 to 100"),
    ({"per_page": 500}, "per_page must be a whole number from 1 to 100"),
    ({"max_bytes": -1}, "max_bytes must be a whole number above 0"),
    ({"timeout": "20"}, "timeout must be a number of seconds above 0"),
    ({"timeout": 0}, "timeout must be a number of seconds above 0"),
])
def test_github_tool_refuses_bad_options_without_echoing_the_token(options: dict[str, Any],
                                                                   message: str) -> None:
    with pytest.raises(ConfigurationError, match=message) as caught:
        GitHubTool("django/django", **options)
    assert "ghp_" not in str(caught.value)


@pytest.mark.skipif(os.open not in os.supports_dir_fd, reason="descriptor-relative opens")
@pytest.mark.parametrize("target", ["guides/deploy.md", "guides"])
def test_a_directory_swapped_for_a_link_after_the_check_is_not_followed(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, target: str) -> None:
    """Only the last component was opened without following links: a directory on the way,
    swapped for a link out of the root between the check and the open, was followed."""
    root, outside = tmp_path / "root", tmp_path / "outside"
    (root / "guides").mkdir(parents=True)
    (root / "guides" / "deploy.md").write_text("inside")
    outside.mkdir()
    (outside / "deploy.md").write_text("TOP SECRET")
    reader = ReadFile(root)
    checked = ReadFile.locate

    def swap_after_the_check(self: ReadFile, path: str) -> Path:
        real = checked(self, path)
        (root / "guides").rename(root / "guides-old")
        (root / "guides").symlink_to(outside, target_is_directory=True)
        return real

    monkeypatch.setattr(ReadFile, "locate", swap_after_the_check)
    with pytest.raises(ToolError, match="changed while it was read"):
        read(reader, target)
