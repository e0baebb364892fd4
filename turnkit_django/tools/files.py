"""Read-only tools: the ``ReadOnlyTool`` base and ``ReadFile``, a reader confined to a root.

``ReadOnlyTool`` declares ``read_only = True`` (what the ``oracle`` specialist requires) and is
replay-safe: reading twice changes nothing. ``read_only`` is trusted metadata, not a sandbox;
the confinement of ``ReadFile`` is its own:

* every path is resolved to its real path (symlinks and ``..`` followed) and must then lie
  inside the root's real path, so a symlink or ``../`` cannot lead out;
* the file is opened with ``O_NOFOLLOW`` and checked to be a regular file by its descriptor, so
  a file swapped for a symlink after the check is refused rather than followed;
* at most ``max_bytes`` (100,000 by default) are returned, marked ``truncated``; files with NUL
  bytes are refused as binary; a directory lists its first ``max_entries`` entries.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..exceptions import ConfigurationError, ToolError
from ..serialization import JsonObject, JsonValue
from .base import Tool, ToolContext

MAX_BYTES = 100_000


class ReadOnlyTool(Tool):
    """Base class of tools that change nothing: declared read-only, and replay-safe."""

    read_only = True
    recovery = "replay_safe"


class ReadFileArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")
    path: str = Field(".", description="A path relative to the root; a directory lists its "
                                       "entries.")


class ReadFile(ReadOnlyTool):
    """Read a text file under the root, or list a directory's entries."""

    name = "read_file"
    Args = ReadFileArgs

    def __init__(self, root: str | os.PathLike[str], *, max_bytes: int = MAX_BYTES,
                 max_entries: int = 200) -> None:
        try:
            real = Path(root).resolve(strict=True)
        except (OSError, RuntimeError):
            raise ConfigurationError(f"read_file root {str(root)!r} does not exist") from None
        if not real.is_dir():
            raise ConfigurationError(f"read_file root {str(root)!r} is not a directory")
        if max_bytes <= 0 or max_entries <= 0:
            raise ConfigurationError("read_file max_bytes and max_entries must be positive")
        self.root = real
        self.max_bytes = max_bytes
        self.max_entries = max_entries

    def locate(self, path: str) -> Path:
        """The real path of ``path`` under the root; ToolError if it is outside or missing."""
        if "\x00" in path:
            raise ToolError("the path contains a NUL byte")
        real = Path(os.path.realpath(self.root / path))
        if real != self.root and self.root not in real.parents:
            raise ToolError(f"{path!r} is outside the readable root; give a path inside it")
        if not real.exists():
            raise ToolError(f"{path!r} does not exist under the root")
        return real

    def call(self, ctx: ToolContext, args: ReadFileArgs) -> JsonObject:
        real = self.locate(args.path)
        relative = real.relative_to(self.root).as_posix() or "."
        if real.is_dir():
            return self._listing(real, relative)
        try:
            fd = os.open(real, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_CLOEXEC", 0))
        except OSError as exc:
            raise ToolError(f"cannot open {relative!r}: {exc.strerror}") from None
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{relative!r} is not a regular file")
            data = handle.read(self.max_bytes + 1)
        if b"\x00" in data:
            raise ToolError(f"{relative!r} is a binary file; only text files can be read")
        truncated = len(data) > self.max_bytes
        return {"path": relative, "size": info.st_size, "truncated": truncated,
                "content": data[:self.max_bytes].decode("utf-8", errors="replace")}

    def _listing(self, real: Path, relative: str) -> JsonObject:
        with os.scandir(real) as scan:
            entries = sorted(scan, key=lambda e: e.name)
        listed: list[JsonValue] = []
        for entry in entries[:self.max_entries]:
            kind = ("link" if entry.is_symlink() else "directory" if entry.is_dir()
                    else "file")
            item: JsonObject = {"name": entry.name, "type": kind}
            if kind == "file":
                item["size"] = entry.stat(follow_symlinks=False).st_size
            listed.append(item)
        return {"path": relative, "entries": listed,
                "truncated": len(entries) > self.max_entries}


__all__ = ["MAX_BYTES", "ReadFile", "ReadOnlyTool"]
