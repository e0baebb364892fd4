"""Model fields whose values every supported database stores alike.

PostgreSQL refuses what SQLite keeps: NUL in text and jsonb, a lone surrogate anywhere, NaN and
infinity in jsonb. Model replies and tool results may hold any of them, so the columns that
store them clean each value on its way in (:func:`~turnkit_django.base.serialization.storable`:
U+FFFD for the characters, ``"nan"``/``"inf"`` for the numbers), the same on every database.
An insert also cleans the instance's attribute, so what the process keeps is what was stored.
Application input is refused before it gets here (``InputError``, ``ConfigurationError``).
"""

from __future__ import annotations

from typing import Any

from django.db import models

from .serialization import storable


class _Storable:
    """Cleans values at the field's two ways into the database (``pre_save`` for inserts and
    saves, ``get_prep_value`` for updates and lookups)."""

    attname: str

    def pre_save(self, model_instance: models.Model, add: bool) -> Any:
        value = storable(super().pre_save(model_instance, add))  # type: ignore[misc]
        setattr(model_instance, self.attname, value)
        return value

    def get_prep_value(self, value: Any) -> Any:
        return storable(super().get_prep_value(value))  # type: ignore[misc]


class StorableJSONField(_Storable, models.JSONField):
    """A ``JSONField`` that stores text and numbers every database accepts."""


class StorableTextField(_Storable, models.TextField):
    """A ``TextField`` without NUL or lone surrogates."""


class StorableCharField(_Storable, models.CharField):
    """A ``CharField`` without NUL or lone surrogates."""


def is_storable_field(field: object) -> bool:
    """Whether ``field`` cleans its values (the one-statement writes do it themselves)."""
    return isinstance(field, _Storable)


__all__ = ["StorableCharField", "StorableJSONField", "StorableTextField", "is_storable_field"]
