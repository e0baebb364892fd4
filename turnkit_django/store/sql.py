"""SQL pieces of turnkit's one-statement writes on PostgreSQL (:mod:`.steps`): quoted names,
values prepared as the ORM prepares them, ``SET`` assignments and row inserts as CTEs."""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from django.db import DEFAULT_DB_ALIAS, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import F, Field, Model, Value
from django.db.models.expressions import CombinedExpression
from django.db.models.functions import Now
from django.utils import timezone

from ..base.fields import is_storable_field
from ..base.serialization import maybe_unstorable, storable
from ..models import Event


class Unsupported(Exception):
    """A buffered write the single statement cannot express (the step takes the lock instead)."""


@dataclass(frozen=True)
class Raw:
    """An SQL expression (with its parameters) a one-statement write assigns as is."""

    text: str
    params: tuple[object, ...] = ()


def db() -> BaseDatabaseWrapper:
    """The connection itself (not the proxy, whose every attribute is a context-local lookup)."""
    return connections[DEFAULT_DB_ALIAS]


@functools.cache
def quote(name: str | None) -> str:
    if not name:
        raise Unsupported("a field without a column")
    return db().ops.quote_name(name)


#: Field types whose Python value is the driver's parameter as is on PostgreSQL (what their
#: ``get_db_prep_save`` returns for the values turnkit writes).
_AS_IS = frozenset({"AutoField", "BigIntegerField", "BooleanField", "CharField", "DateTimeField",
                    "DecimalField", "ForeignKey", "IntegerField", "OneToOneField",
                    "PositiveBigIntegerField", "PositiveIntegerField",
                    "PositiveSmallIntegerField", "SmallIntegerField", "TextField"})


def _preparer(field: Field[Any, Any], db: BaseDatabaseWrapper) -> Callable[[Any], Any]:
    """``field.get_db_prep_save`` for one field, without its generic dispatch per value; a
    JSON field's value becomes its JSON text (sent as ``%s::jsonb``, see :func:`placeholder`)."""
    kind = field.get_internal_type()
    if kind in _AS_IS:
        return storable if is_storable_field(field) else _same
    if kind == "JSONField":
        return functools.partial(json_text, field)
    return lambda value: field.get_db_prep_save(value, db)


def json_text(field: Field[Any, Any], value: Any) -> str | None:
    """The JSON text a JSON ``field`` stores for ``value`` (None for SQL NULL), as its
    encoder writes it and, for a storable field, cleaned as the field cleans it: one
    ``json.dumps`` for a clean value, the driver sends the text as it is."""
    if value is None:
        return None
    encoder = getattr(field, "encoder", None)
    text = json.dumps(value, cls=encoder)
    if is_storable_field(field) and maybe_unstorable(text):
        text = json.dumps(storable(value), cls=encoder)
    return text


@functools.cache
def placeholder(model: type[Model], name: str) -> str:
    """How a value of ``model.name`` prepared by its :func:`_setter` goes in a statement."""
    return "%s::jsonb" if field_of(model, name).get_internal_type() == "JSONField" else "%s"


def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class _Column:
    column: str  # the column's name (the JSON record's key)
    attname: str
    name: str  # the model field's name
    to_json: Callable[[Any], Any]
    stamped: bool  # auto_now or auto_now_add: the insert's time
    clean: bool  # a storable field (turnkit_django.base.fields): its value is cleaned on the way in


def _json_of(field: Field[Any, Any]) -> Callable[[Any], Any]:
    """How a value of ``field`` is written in a JSON record ``jsonb_populate_record`` reads."""
    kind = field.get_internal_type()
    if kind == "DateTimeField":
        return lambda value: None if value is None else value.isoformat()
    if kind == "DecimalField":
        return lambda value: None if value is None else str(value)
    return _same


@functools.cache
def columns(model: type[Model]) -> tuple[_Column, ...]:
    """The concrete columns of ``model``, with how each is written in a JSON record."""
    return tuple(
        _Column(str(f.column), f.attname, f.name, _json_of(f),
                bool(getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False)),
                is_storable_field(f))
        for f in model._meta.concrete_fields)


def _value(obj: Model, column: _Column) -> Any:
    """``obj``'s value of ``column`` as its record holds it; a storable field's value is cleaned
    on the instance too, as the field's ``pre_save`` does."""
    value = getattr(obj, column.attname)
    if column.clean:
        value = storable(value)
        setattr(obj, column.attname, value)
    return column.to_json(value)


@functools.cache
def field_of(model: type[Model], name: str) -> Field[Any, Any]:
    found = model._meta.get_field(name)
    if not isinstance(found, Field):
        raise Unsupported(f"{model.__name__}.{name} is not a column")
    return found


@functools.cache
def _setter(model: type[Model], name: str) -> tuple[str, Callable[[Any], Any]]:
    """The quoted column of ``model.name`` and the preparer of its values."""
    model_field = field_of(model, name)
    return quote(model_field.column), _preparer(model_field, db())


@functools.cache
def table(model: type[Model]) -> str:
    return quote(model._meta.db_table)


def assign(model: type[Model], fields: Mapping[str, object], params: list[object],
            db: BaseDatabaseWrapper) -> str:
    """``SET`` assignments of ``fields``: values, ``Now()``, ``F(name) + value`` and
    :class:`Raw` expressions."""
    out = []
    for name, value in fields.items():
        column, prepare = _setter(model, name)
        if isinstance(value, Raw):
            out.append(f"{column} = {value.text}")
            params.extend(value.params)
        elif isinstance(value, Now):
            out.append(f"{column} = statement_timestamp()")
        elif isinstance(value, CombinedExpression):
            lhs, rhs = value.lhs, value.rhs
            if not (value.connector == "+" and isinstance(lhs, F)
                    and getattr(lhs, "name", None) == name):
                raise Unsupported(f"{name} = {value!r}")
            amount = rhs.value if isinstance(rhs, Value) else rhs
            out.append(f"{column} = {column} + %s")
            params.append(prepare(amount))
        elif hasattr(value, "resolve_expression") or isinstance(value, Model):
            raise Unsupported(f"{name} = {value!r}")
        else:
            out.append(f"{column} = {placeholder(model, name)}")
            params.append(prepare(value))
    return ", ".join(out)


def insert(name: str, obj: Model, params: list[object], *, source: str,
           computed: dict[str, tuple[str, list[object]]] | None = None) -> str:
    """A CTE inserting ``obj`` for each row of ``source`` (one row, or none).

    The row travels as one JSON record (one parameter, however many columns) that
    ``jsonb_populate_record`` turns into the table's row type; ``computed`` columns take an
    SQL expression (with its parameters) evaluated in the statement instead, so they are left
    out of the record.
    """
    model = type(obj)
    record: dict[str, object] = {}
    now: datetime | None = None
    selected = []
    for column in columns(model):
        if computed and column.name in computed:
            expression, extra = computed[column.name]
            selected.append(expression)
            params.extend(extra)
            continue
        if column.stamped:  # what pre_save does for auto_now(_add) fields
            now = now or timezone.now()
            setattr(obj, column.attname, now)
        record[column.column] = column.to_json(getattr(obj, column.attname))
        selected.append(f"r.{quote(column.column)}")
    text = json.dumps(record, separators=(",", ":"))
    if maybe_unstorable(text):  # cleaned as the fields clean them (rarely: output that has it)
        text = json.dumps({c: _value(obj, column) for column in columns(model)
                           if (c := column.column) in record}, separators=(",", ":"))
    params.append(text)
    quoted = table(model)
    return (f"{name} AS (INSERT INTO {quoted} ({column_list(model)}) "
            f"SELECT {', '.join(selected)} FROM {source}, "
            f"jsonb_populate_record(NULL::{quoted}, %s::jsonb) AS r)")


@functools.cache
def column_list(model: type[Model], *, without: str = "") -> str:
    """The quoted concrete columns of ``model`` in their order (less the field ``without``)."""
    return ", ".join(quote(c.column) for c in columns(model) if c.name != without)


def insert_events(events: list[Event], params: list[object], source: str = "t") -> str:
    """One CTE inserting the step's events in order, their ids drawn from the sequence row by
    row (the column's default, evaluated as the sorted rows are inserted), under the tree lock
    the statement holds (the tree's cursor order)."""
    records = []
    for event in events:
        event.created_at = event.created_at or timezone.now()
        records.append({c.column: c.to_json(getattr(event, c.attname))
                        for c in columns(Event) if c.name != "id"})
    text = json.dumps(records, separators=(",", ":"))
    if maybe_unstorable(text):  # cleaned as the fields clean them
        text = json.dumps([{c.column: _value(event, c) for c in columns(Event) if c.name != "id"}
                           for event in events], separators=(",", ":"))
    params.append(text)
    quoted = table(Event)
    names = column_list(Event, without="id")
    selected = ", ".join(f"r.{quote(c.column)}" for c in columns(Event) if c.name != "id")
    return (f"e AS (INSERT INTO {quoted} ({names}) SELECT {selected} FROM {source}, "
            f"jsonb_populate_recordset(NULL::{quoted}, %s::jsonb) WITH ORDINALITY AS r "
            "ORDER BY r.ordinality)")


__all__ = ["Raw", "Unsupported", "assign", "column_list", "columns", "db", "field_of", "insert",
           "insert_events", "json_text", "placeholder", "quote", "table"]
