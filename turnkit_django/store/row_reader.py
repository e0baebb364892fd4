"""Reading a row back without the ORM's query building, for the hot path.

:func:`reload` reads a row again into the same instance (``refresh_from_db()`` without its
query compilation); :func:`adopt` sets an instance to a row a write returned
(:func:`row_columns` names its columns); :func:`converted` turns such a row's values into what
the ORM would have read. Each model's columns, its one-row ``SELECT`` and its converters are
worked out once per process (:func:`_reader`).
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any, NamedTuple, TypeVar

from django.db import connection
from django.db.models import Field, Model

from .cursors import hot_cursor

M = TypeVar("M", bound=Model)


def reload(row: M) -> M:
    """Read ``row`` again from the database into the same instance (``refresh_from_db()``
    without its query compilation, for the hot path's one read after a run); raises
    ``DoesNotExist`` when it is gone."""
    model = type(row)
    reader = _reader(model, connection.vendor)
    with hot_cursor(connection) as cursor:
        cursor.execute(reader.select, [row.pk])
        found = cursor.fetchone()
    if found is None:
        raise model.DoesNotExist(  # type: ignore[attr-defined]
            f"{model.__name__} {row.pk!r} no longer exists")
    return adopt(row, found)


def adopt(row: M, values: Sequence[Any]) -> M:
    """Set ``row`` to ``values`` (its :func:`row_columns`, read or returned by a write)."""
    model = type(row)
    for column, value in zip(_reader(model, connection.vendor).fields, converted(model, values),
                             strict=True):
        if column.is_relation and getattr(row, column.attname) != value \
                and column.is_cached(row):  # type: ignore[attr-defined]
            column.delete_cached_value(row)  # type: ignore[attr-defined]
        setattr(row, column.attname, value)
    row._state.adding, row._state.db = False, connection.alias
    return row


def row_columns(model: type[Model]) -> str:
    """The columns of a row of ``model`` as :func:`adopt` takes them (quoted, in order)."""
    return _reader(model, connection.vendor).columns


def converted(model: type[Model], values: Sequence[Any]) -> list[Any]:
    """A row of ``model`` as :func:`_reader`'s columns select it, converted as the ORM does."""
    out = []
    for value, convert in zip(values, _reader(model, connection.vendor).converters, strict=True):
        for converter, expression in convert:
            value = converter(value, expression, connection)
        out.append(value)
    return out


class _Reader(NamedTuple):
    fields: tuple[Field[Any, Any], ...]
    columns: str  # the fields' columns, as a SELECT (or RETURNING) list
    select: str  # one row by primary key
    converters: tuple[tuple[tuple[Callable[..., Any], Any], ...], ...]  # per column


@functools.cache
def _reader(model: type[Model], vendor: str) -> _Reader:
    """How a row of ``model`` is read without the ORM: its fields and columns, the SELECT of one
    row by primary key, and each column's converters (the backend's, then the field's), as
    the ORM applies them."""
    ops = connection.ops
    table = model._meta.db_table
    fields = tuple(model._meta.concrete_fields)
    columns = ", ".join(ops.quote_name(str(f.column)) for f in fields)
    pk = str(model._meta.pk.column) if model._meta.pk is not None else "id"
    select = (f"SELECT {columns} FROM {ops.quote_name(table)} "  # noqa: S608 (identifiers only)
              f"WHERE {ops.quote_name(pk)} = %s")
    converters = []
    for f in fields:
        col = f.get_col(table)
        converters.append(tuple((c, col) for c in
                                [*ops.get_db_converters(col), *f.get_db_converters(connection)]))
    return _Reader(fields, columns, select, tuple(converters))


__all__ = ["adopt", "converted", "reload", "row_columns"]
