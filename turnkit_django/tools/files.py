"""Read-only tools: the ``ReadOnlyTool`` base and ``ReadFile``, a reader confined to a root.

``ReadOnlyTool`` declares ``read_only = True`` (what the ``oracle`` specialist requires) and is
replay-safe: reading twice changes nothing. ``read_only`` is trusted metadata, not a sandbox;
the confinement of ``ReadFile`` is its own:

* every path is resolved to its real path (symlinks and ``..`` followed) and must then lie
  inside the root's real path, so a symlink or ``../`` cannot lead out;
* the file is opened from the root one component at a time with ``O_NOFOLLOW`` and checked to
  be a regular file by its descriptor, so a file or a directory on its way swapped for a
  symlink after the check is refused rather than followed; it is opened with ``O_NONBLOCK``
  too, so a named pipe is refused instead of blocking the worker;
* at most ``max_bytes`` (100,000 by default) are returned, marked ``truncated`` and cut on a
  character boundary (a UTF-8 character the limit splits is left out, not replaced by U+FFFD);
  files with NUL bytes are refused as binary; a directory lists its first ``max_entries`` entries.
"""

from __future__ import annotations

import codecs
import errno
import os
import stat
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from ..base.serialization import JsonObject, JsonValue
from ..exceptions import ConfigurationError, ToolError
from .tool import Tool, ToolContext

MAX_BYTES = 100_000
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


def positive_int(value: object) -> bool:
    """Whether ``value`` is a whole number above 0 (``True`` is not one)."""
    return isinstance(value, int) and not isinstance(value, bool) and value > 0


def text_prefix(data: bytes, limit: int) -> str:
    """The UTF-8 text of ``data`` cut to at most ``limit`` bytes on a character boundary: a
    character the limit splits is left out; bytes that are not UTF-8 read as U+FFFD."""
    if len(data) <= limit:
        return data.decode("utf-8", errors="replace")
    # Not final: the decoder holds back an incomplete sequence at the end (the split character)
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode(data[:limit])


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
        if not isinstance(root, str | os.PathLike) or "\x00" in os.fspath(root):
            raise ConfigurationError(f"read_file root must be a directory path (str or Path), "
                                     f"got {root!r}")
        try:
            real = Path(root).resolve(strict=True)
        except (OSError, RuntimeError, TypeError):
            raise ConfigurationError(f"read_file root {str(root)!r} does not exist") from None
        if not real.is_dir():
            raise ConfigurationError(f"read_file root {str(root)!r} is not a directory")
        for option, value in (("max_bytes", max_bytes), ("max_entries", max_entries)):
            if not positive_int(value):
                raise ConfigurationError(f"read_file {option} must be a whole number above 0, "
                                         f"got {value!r}")
        self.root = real
        self.max_bytes = max_bytes
        self.max_entries = max_entries

    def locate(self, path: str) -> Path:
        """The real path of ``path`` under the root; ToolError if it is outside or missing."""
        if "\x00" in path:
            raise ToolError("the path contains a NUL byte")
        shown = path if len(path) <= 200 else path[:200] + "..."
        try:
            real = Path(os.path.realpath(self.root / path))
            inside = real == self.root or self.root in real.parents
            found = inside and real.exists()
        except (OSError, ValueError) as exc:  # too long, or otherwise refused by the system;
            # the message names the given path only, never the root's location on the server
            reason = getattr(exc, "strerror", None) or "refused by the system"
            raise ToolError(f"{shown!r} is not a usable path ({reason}); give a shorter path "
                            "inside the root") from None
        if not inside:
            raise ToolError(f"{shown!r} is outside the readable root; give a path inside it")
        if not found:
            raise ToolError(f"{shown!r} does not exist under the root")
        return real

    def call(self, ctx: ToolContext, args: ReadFileArgs) -> JsonObject:
        real = self.locate(args.path)
        relative = real.relative_to(self.root).as_posix() or "."
        if real.is_dir():
            return self._listing(self._open(real, relative, directory=True), relative)
        fd = self._open(real, relative, directory=False)
        with os.fdopen(fd, "rb") as handle:
            info = os.fstat(handle.fileno())
            if not stat.S_ISREG(info.st_mode):
                raise ToolError(f"{relative!r} is not a regular file")
            data = handle.read(self.max_bytes + 1)
        if b"\x00" in data:
            raise ToolError(f"{relative!r} is a binary file; only text files can be read")
        truncated = len(data) > self.max_bytes
        return {"path": relative, "size": info.st_size, "truncated": truncated,
                "content": text_prefix(data, self.max_bytes)}

    def _open(self, real: Path, relative: str, *, directory: bool) -> int:
        """A descriptor of ``real`` (resolved, inside the root), opened one component at a
        time from the root without following a link: a directory on the way swapped for a link
        after :meth:`locate` checked the path is refused, not followed out of the root. (Where
        the system has no descriptor-relative open, only the last component is guarded.)
        ``O_NONBLOCK``: a named pipe must not block the worker before fstat refuses it."""
        flags = os.O_RDONLY | _NOFOLLOW | getattr(os, "O_CLOEXEC", 0)
        last = flags | (_DIRECTORY if directory else getattr(os, "O_NONBLOCK", 0))
        parts = real.relative_to(self.root).parts
        try:
            if os.open not in os.supports_dir_fd:  # pragma: no cover - not on Linux or macOS
                return os.open(real, last)
            fd = os.open(self.root, flags | _DIRECTORY)
            for index, name in enumerate(parts):
                try:
                    inner = os.open(name, last if index == len(parts) - 1
                                    else flags | _DIRECTORY, dir_fd=fd)
                finally:
                    os.close(fd)
                fd = inner
            return fd
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise ToolError(f"{relative!r} changed while it was read (a link appeared on "
                                "its way); read it again") from None
            raise ToolError(f"cannot open {relative!r}: {exc.strerror}") from None

    def _listing(self, fd: int, relative: str) -> JsonObject:
        try:
            with os.scandir(fd) as scan:
                entries = sorted(scan, key=lambda e: e.name)
        except OSError as exc:
            raise ToolError(f"cannot list {relative!r}: {exc.strerror}") from None
        finally:
            os.close(fd)
        listed: list[JsonValue] = []
        for entry in entries[:self.max_entries]:
            kind = ("link" if entry.is_symlink() else "directory" if entry.is_dir()
                    else "file")
            item: JsonObject = {"name": entry.name, "type": kind}
            if kind == "file":
                try:
                    item["size"] = entry.stat(follow_symlinks=False).st_size
                except OSError:
                    item["size"] = None  # removed while listing
            listed.append(item)
        return {"path": relative, "entries": listed,
                "truncated": len(entries) > self.max_entries}


__all__ = ["MAX_BYTES", "ReadFile", "ReadOnlyTool", "positive_int", "text_prefix"]
