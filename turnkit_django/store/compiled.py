"""Compiled reads: a hot read's SQL built by the ORM once per process, then run with new values.

Building and compiling a queryset costs more client CPU than the round trip of a small read
(a few milliseconds for a read with subqueries, against a tenth of that for the statement on the
server), so the reads a background turn makes every time (the tree lock, the lane's state) are
compiled once, with placeholder values, and then sent with the real ones. The rows are
converted as the ORM converts them (the backend's converters, then the fields'), so a JSON
column reads as a dict and a timestamp as an aware datetime, exactly as through the queryset.

Only ``values_list()`` querysets whose variable parts are plain parameters qualify; a
placeholder that the ORM would transform (a ``LIKE`` pattern, a list) is refused when the read
is first compiled, so a wrong read cannot be cached. :class:`CompiledUpdate` does the same for a
compare-and-set ``queryset.update(**changes)`` a turn sends at every tool call.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any, cast

from django.db import connections, transaction
from django.db.models import QuerySet
from django.db.models.sql.subqueries import UpdateQuery

from .cursors import hot_cursor

_PLACEHOLDER = "\x00turnkit-compiled-{}\x00"
#: The placeholder of an integer value (``ints=``): in range of every integer field (the ORM
#: compiles an out-of-range comparison to nothing), and held by no fence.
_INT_PLACEHOLDER = 2_147_483_000
#: A compiled read: its SQL, the slot of each parameter (an index into the values, or None for a
#: constant), the constants, and the converters of its columns.
_Compiled = tuple[str, tuple[int | None, ...], tuple[object, ...],
                  list[tuple[int, tuple[list[Any], Any]]]]


class CompiledRead:
    """``build(*values)`` returns a ``values_list()`` queryset; :meth:`rows` runs it."""

    def __init__(self, build: Callable[..., QuerySet[Any, Any]], arity: int) -> None:
        self._build = build
        self._arity = arity
        self._compiled: dict[str, _Compiled] = {}
        self._lock = threading.Lock()

    def rows(self, *values: object, using: str = "default") -> list[tuple[Any, ...]]:
        """The rows of the read for ``values``, converted as the ORM converts them."""
        sql, params = self.fragment(*values, using=using)
        converters = self._compiled_for(using)[3]
        connection = connections[using]
        with hot_cursor(connection) as cursor:
            cursor.execute(sql, params)
            found = cursor.fetchall()
        if not converters:
            return found
        out = []
        for row in found:
            converted = list(row)
            for index, (functions, expression) in converters:
                value = converted[index]
                for function in functions:
                    value = function(value, expression, connection)
                converted[index] = value
            out.append(tuple(converted))
        return out

    def fragment(self, *values: object, using: str = "default") -> tuple[str, list[Any]]:
        """The read's SQL and parameters for ``values``, to embed in a larger statement (its
        rows unconverted: for ``EXISTS``, not for a select list)."""
        sql, slots, constants, _ = self._compiled_for(using)
        return sql, [values[slot] if slot is not None else constant
                     for slot, constant in zip(slots, constants, strict=True)]

    def _compiled_for(self, using: str) -> _Compiled:
        compiled = self._compiled.get(using)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.setdefault(using, self._compile(using))
        return compiled

    def _compile(self, using: str) -> _Compiled:
        placeholders = [_PLACEHOLDER.format(index) for index in range(self._arity)]
        compiler = self._build(*placeholders).query.get_compiler(using=using)
        sql, slots, constants = _slotted(compiler.as_sql(), placeholders, self._arity)
        expressions = [column[0] for column in compiler.select]
        return sql, slots, constants, sorted(compiler.get_converters(expressions).items())


class CompiledUpdate:
    """``build(*values).update(**changes)`` compiled once per database: :meth:`execute`
    returns the rows it changed. ``changes`` are constants (values or expressions such as
    ``Now()``); the values at the positions in ``ints`` are integers (a fence), the rest
    strings. Sent as :mod:`.cursors` sends hot statements, and, like ``update()``, marking an
    enclosing atomic block for rollback when it fails."""

    def __init__(self, build: Callable[..., QuerySet[Any, Any]], changes: dict[str, object],
                 arity: int = 1, *, ints: Sequence[int] = ()) -> None:
        self._build = build
        self._changes = changes
        self._arity = arity
        self._ints = frozenset(ints)
        self._compiled: dict[str, tuple[str, tuple[int | None, ...], tuple[object, ...],
                                        tuple[Callable[[Any], Any] | None, ...]]] = {}
        self._lock = threading.Lock()

    def execute(self, *values: object, using: str = "default") -> int:
        compiled = self._compiled.get(using)
        if compiled is None:
            with self._lock:
                compiled = self._compiled.setdefault(using, self._compile(using))
        sql, slots, constants, types = compiled
        params = [constant if slot is None else values[slot] if types[slot] is None
                  else types[slot](values[slot])  # type: ignore[misc]
                  for slot, constant in zip(slots, constants, strict=True)]
        with transaction.mark_for_rollback_on_error(using), \
                hot_cursor(connections[using]) as cursor:
            cursor.execute(sql, params)
            return int(cursor.rowcount)

    def _compile(self, using: str) -> tuple[str, tuple[int | None, ...], tuple[object, ...],
                                            tuple[Callable[[Any], Any] | None, ...]]:
        placeholders: list[object] = [
            _INT_PLACEHOLDER - index if index in self._ints else _PLACEHOLDER.format(index)
            for index in range(self._arity)]
        query = cast(UpdateQuery, self._build(*placeholders).query.chain(UpdateQuery))
        query.add_update_values(self._changes)
        query.annotations = {}  # as QuerySet.update()
        compiled = query.get_compiler(using=using).as_sql()
        sql, slots, constants = _slotted(compiled, placeholders, self._arity)
        # an integer goes as the ORM sent its placeholder (psycopg's Int8 on PostgreSQL)
        types: list[Callable[[Any], Any] | None] = [None] * self._arity
        for slot, param in zip(slots, compiled[1], strict=True):
            if slot is not None and slot in self._ints:
                types[slot] = type(param)
        return sql, slots, constants, tuple(types)


def _slotted(compiled: tuple[str, Sequence[object]], placeholders: Sequence[object],
             arity: int) -> tuple[str, tuple[int | None, ...], tuple[object, ...]]:
    """The statement's SQL, the slot of each parameter (None: a constant), the constants."""
    sql, params = compiled
    index = {placeholder: slot for slot, placeholder in enumerate(placeholders)}
    slots: list[int | None] = []
    for param in params:
        found = None
        if isinstance(param, str):
            found = index.get(param)
            if found is None and "\x00turnkit-compiled-" in param:
                raise ValueError(f"a compiled read's value was transformed ({param!r}): "
                                 "read it through the ORM instead")
        elif isinstance(param, int) and not isinstance(param, bool):
            found = index.get(int(param))
        slots.append(found)
    if sorted(set(s for s in slots if s is not None)) != list(range(arity)):
        raise ValueError("a compiled read must use each of its values as a parameter")
    constants = [None if slot is not None else param
                 for slot, param in zip(slots, params, strict=True)]
    return sql, tuple(slots), tuple(constants)


__all__ = ["CompiledRead", "CompiledUpdate"]
