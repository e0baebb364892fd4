"""Media into turns: one input type from paths, URLs, bytes and Django files, with size limits.

:func:`to_media` turns what applications hold into a :class:`~turnkit_django.clients.media.
MediaInput`:

* a ``MediaInput``, used as it is;
* an ``https://`` (or ``http://``) URL string: passed to the provider, which fetches it; nothing
  is downloaded here;
* a ``data:`` URL string: its bytes;
* any other string, or a :class:`~pathlib.Path`: a file on this server's disk, read here. Never
  hand a string a model wrote to it: ``ViewMediaTool`` takes only https URLs from the model;
* ``bytes`` (with ``mime_type=``, or recognised from their first bytes), or ``(bytes, mime)``;
* a Django :class:`~django.core.files.File`: an upload (``request.FILES["photo"]``), the
  ``FieldFile`` of a ``FileField`` (``upload.file``), a ``ContentFile``; or any binary file object.
  An open file is read from its start and left open at its position; a closed ``FieldFile`` is
  opened from its storage and closed again.

Each input is at most ``max_bytes`` (20 MiB unless given): larger ones raise ``MediaError`` before
anything is sent. The MIME type is, in order: ``mime_type=``, the bytes' signature (PNG, JPEG,
GIF, WebP, PDF), an upload's ``content_type``, the name's extension.

Generated image bytes are kept by :mod:`turnkit_django.store.media`, never in a column.
"""

from __future__ import annotations

import base64
import binascii
import mimetypes
import os
from pathlib import Path
from typing import Protocol, runtime_checkable
from urllib.parse import unquote_to_bytes, urlsplit

from django.core.files import File

from ..exceptions import MediaError
from .media import MediaInput, Source, public_url, web_url

#: The largest medium :func:`to_media` accepts unless told otherwise (bytes).
MAX_BYTES = 20 * 1024 * 1024
#: The most media one ``view_media`` analyses, and the most input images one ``paint`` edits
#: (as many as an OpenAI image edit takes): each is read into memory, up to ``max_bytes``.
MAX_MEDIA_ITEMS = 16
_SIGNATURES = (
    (b"\x89PNG\r\n\x1a\n", "image/png"),
    (b"\xff\xd8\xff", "image/jpeg"),
    (b"GIF87a", "image/gif"),
    (b"GIF89a", "image/gif"),
    (b"%PDF-", "application/pdf"),
)


@runtime_checkable
class _Readable(Protocol):
    """A binary file object: anything with ``read(size)``."""

    def read(self, size: int = -1, /) -> bytes | str: ...


@runtime_checkable
class _Seekable(_Readable, Protocol):
    """A file object that can be rewound."""

    def seek(self, offset: int, /) -> int: ...

    def tell(self) -> int: ...


def byte_limit(max_bytes: object) -> int:
    """The size cap ``max_bytes=`` asks for (None: :data:`MAX_BYTES`); MediaError for anything
    but a positive int."""
    if max_bytes is None:
        return MAX_BYTES
    if not isinstance(max_bytes, int) or isinstance(max_bytes, bool) or max_bytes <= 0:
        raise MediaError(f"max_bytes= must be None ({MAX_BYTES} bytes, 20 MiB) or a positive "
                         f"int, got {max_bytes!r:.40}")
    return max_bytes


def to_media(value: object, *, mime_type: str | None = None, name: str | None = None,
             max_bytes: int | None = None) -> MediaInput:
    """Normalise ``value`` (see the module docstring) into a :class:`MediaInput`."""
    limit = byte_limit(max_bytes)
    if isinstance(value, MediaInput):
        _check_size(value.size, limit, value.name)
        return value
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], str):
        return to_media(value[0], mime_type=value[1], name=name, max_bytes=limit)
    if isinstance(value, str) and value.startswith("data:"):
        return _data_url(value, name, limit)
    if isinstance(value, str) and urlsplit(value).scheme in ("http", "https"):
        return _url(value, mime_type, name)
    if isinstance(value, str | os.PathLike):
        return _path(Path(value), mime_type, name, limit)
    if isinstance(value, bytes | bytearray | memoryview):
        data = bytes(value)
        _check_size(len(data), limit, name or "bytes")
        return _from_bytes(data, mime_type, name or "", None, "bytes")
    if isinstance(value, File) or (isinstance(value, _Readable) and callable(value.read)):
        return _file(value, mime_type, name, limit)
    raise MediaError(
        f"cannot use {type(value).__name__} as media: pass a path, an https URL, bytes with "
        "mime_type=, a (bytes, mime_type) pair, or a Django File (an upload or a FileField's file)"
    )


def to_media_list(values: object, *, max_bytes: int | None = None) -> tuple[MediaInput, ...]:
    """Normalise one medium or a list of them (a tuple is a ``(bytes, mime)`` pair), at most
    :data:`MAX_MEDIA_ITEMS`."""
    items = list(values) if isinstance(values, list) else [values]
    if not items:
        raise MediaError("no media given: pass at least one file, path, URL or bytes")
    media_count(items, "media")
    return tuple(to_media(item, max_bytes=max_bytes) for item in items)


def media_count(items: list[object] | tuple[object, ...], what: str) -> None:
    """MediaError when ``items`` are more than :data:`MAX_MEDIA_ITEMS`, before any is read."""
    if len(items) > MAX_MEDIA_ITEMS:
        raise MediaError(f"at most {MAX_MEDIA_ITEMS} {what} in one call, got {len(items)}: "
                         "split them over several calls")


def _check_size(size: int | None, limit: int, name: str, *, exact: bool = True) -> None:
    if size is not None and size > limit:
        what = f"{size} bytes" if exact else "larger"
        raise MediaError(f"media {name!r} is {what}, over the limit of {limit} bytes: "
                         "send a smaller file, or raise the limit with max_bytes=")


def _url(url: str, mime_type: str | None, name: str | None) -> MediaInput:
    parts = urlsplit(web_url(url))
    guessed = mime_type or mimetypes.guess_type(parts.path)[0]
    if not guessed:
        raise MediaError(f"cannot tell the type of media at {public_url(url)!r} from its path: "
                         "pass mime_type=")
    return MediaInput(mime_type=guessed, url=url, name=name or os.path.basename(parts.path),
                      source="url")


def _data_url(url: str, name: str | None, limit: int) -> MediaInput:
    header, _, payload = url[5:].partition(",")
    mime, _, encoding = header.partition(";")
    try:
        data = (base64.b64decode(payload, validate=True) if encoding == "base64"
                else unquote_to_bytes(payload))
    except (binascii.Error, ValueError):
        raise MediaError("the data: URL does not hold valid base64") from None
    _check_size(len(data), limit, name or "data URL")
    return _from_bytes(data, mime or None, name or "", None, "bytes")


def _path(path: Path, mime_type: str | None, name: str | None, limit: int) -> MediaInput:
    if not path.is_file():
        raise MediaError(f"media path {str(path)!r} is not a file")
    _check_size(path.stat().st_size, limit, path.name)
    with path.open("rb") as handle:
        data = _read(handle, limit, path.name)
    return _from_bytes(data, mime_type, name or path.name, None, "path")


def _file(file: File | _Readable, mime_type: str | None, name: str | None,
          limit: int) -> MediaInput:
    label = name or os.path.basename(str(getattr(file, "name", "") or "")) or "file"
    try:
        size = file.size if isinstance(file, File) else None
    except (OSError, ValueError):
        size = None  # a FieldFile whose file is missing: reading it says so below
    _check_size(size, limit, label)
    try:
        if isinstance(file, File) and file.closed:  # a FieldFile not opened yet
            with file.open("rb"):
                data = _read(file, limit, label)
        else:
            data = _read_rewound(file, limit, label)
    except (OSError, ValueError) as exc:
        raise MediaError(f"cannot read media {label!r}: {exc}") from None
    content_type = getattr(file, "content_type", None)
    return _from_bytes(data, mime_type, label, content_type, "file")


def _read_rewound(file: _Readable, limit: int, label: str) -> bytes:
    """Read an open file from its start and put its position back (the caller may save it)."""
    if not isinstance(file, _Seekable):
        return _read(file, limit, label)
    position = file.tell()
    file.seek(0)
    try:
        return _read(file, limit, label)
    finally:
        file.seek(position)


def _read(stream: _Readable, limit: int, label: str) -> bytes:
    data = stream.read(limit + 1)  # one byte more than allowed tells a file over the limit
    if isinstance(data, str):
        raise MediaError(f"media {label!r} was opened in text mode: open it in binary mode ('rb')")
    _check_size(len(data), limit, label, exact=False)
    return bytes(data)


def _from_bytes(data: bytes, mime_type: str | None, name: str, content_type: str | None,
                source: Source) -> MediaInput:
    if not data:
        raise MediaError(f"media {name or 'bytes'!r} is empty (0 bytes): pass the file's bytes")
    mime = mime_type or sniff(data) or content_type or mimetypes.guess_type(name)[0]
    if not mime:
        raise MediaError(f"cannot tell the type of media {name or 'bytes'!r}: pass mime_type=")
    return MediaInput(mime_type=mime, data=data, name=name, source=source)


def sniff(data: bytes) -> str | None:
    """The MIME type the first bytes show (PNG, JPEG, GIF, WebP, PDF), or None."""
    for signature, mime in _SIGNATURES:
        if data.startswith(signature):
            return mime
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None


__all__ = ["MAX_BYTES", "MAX_MEDIA_ITEMS", "byte_limit", "media_count", "sniff", "to_media",
           "to_media_list"]
