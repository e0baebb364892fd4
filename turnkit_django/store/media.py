"""The bytes of generated images: kept in a Django storage, never in a column.

:func:`save_image` puts them in the storage named by ``TURNKIT["MEDIA_STORAGE"]`` (an alias of
``settings.STORAGES``; ``None`` is ``"default"``) under ``turnkit/images/<turn id>/<image
id>.<ext>``; the image message's :class:`~turnkit_django.messages.ImagePart` holds the alias and
the stored name. :func:`image_url` and :func:`open_image` read them back.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Protocol

from django.core.files import File
from django.core.files.base import ContentFile
from django.core.files.storage import InvalidStorageError, Storage, storages

from ..conf import turnkit_settings
from ..exceptions import ConfigurationError, MediaError

_EXTENSIONS = {"image/png": "png", "image/jpeg": "jpg", "image/gif": "gif", "image/webp": "webp"}


class StoredImage(Protocol):
    """What locates an image: an :class:`~turnkit_django.messages.ImagePart` or a recorded
    :class:`~turnkit_django.clients.media.GeneratedImage`."""

    @property
    def id(self) -> str | None: ...

    @property
    def url(self) -> str | None: ...

    @property
    def storage(self) -> str | None: ...

    @property
    def name(self) -> str | None: ...


def media_storage() -> tuple[str, Storage]:
    """The alias and storage that keep generated images (``TURNKIT["MEDIA_STORAGE"]``)."""
    alias = turnkit_settings.MEDIA_STORAGE or "default"  # validated: an alias of STORAGES
    try:
        return alias, storages[alias]
    except InvalidStorageError as exc:  # the alias is there, its backend cannot be built
        raise ConfigurationError(
            f"The media storage {alias!r} (TURNKIT['MEDIA_STORAGE']) could not be created: "
            f"{exc} Fix its BACKEND in settings.STORAGES."
        ) from None


def save_image(data: bytes, mime_type: str, *, turn_id: str, image_id: str) -> tuple[str, str]:
    """Store generated image bytes; return (storage alias, stored name)."""
    alias, storage = media_storage()
    extension = _EXTENSIONS.get(mime_type, "bin")
    return alias, storage.save(f"turnkit/images/{turn_id}/{image_id}.{extension}",
                               ContentFile(data))


def delete_images(stored: Iterable[tuple[str, str]]) -> None:
    """Remove stored images whose record could not be written (best effort)."""
    for alias, name in stored:
        try:
            storages[alias].delete(name)
        except Exception:  # noqa: S110 - leaving an orphan file is the lesser harm
            pass


def image_url(image: StoredImage) -> str | None:
    """The image's provider URL, else its storage URL (None when the storage has no URLs)."""
    if image.url:
        return image.url
    if not image.storage or not image.name:
        return None
    try:
        return str(storages[image.storage].url(image.name))
    except (NotImplementedError, ValueError, InvalidStorageError):  # no URLs, or unknown
        return None


def open_image(image: StoredImage) -> File:
    """Open a stored image for reading (close it when done)."""
    if not image.storage or not image.name:
        raise MediaError(f"image {image.id!r} is not stored (only its URL is known)")
    return storages[image.storage].open(image.name, "rb")


__all__ = ["StoredImage", "delete_images", "image_url", "media_storage", "open_image",
           "save_image"]
