"""Compiled reads: a hot read's SQL built by the ORM once per process, then run with new values.

Building and compiling a queryset costs more client CPU than the round trip of a small read
(a few milliseconds for a read with subqueries, against a tenth of that for the statement on the
server), so the reads a background turn makes every time (the tree lock, the lane's state) are
compiled once, with placeholder values, and then sent with the real ones. The rows are
converted as the ORM converts them (the backend's converters, then the fields'), so a JSON
column reads as a dict and a timestamp as an aware datetime, exactly as through the queryset.

Only ``values_list()`` querysets whose variable parts are plain parameters qualify; a
placeholder that the ORM would transform (a ``LIKE`` pattern, a list) is refused when the read
is first compiled, so a wrong read cannot be cached.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from django.db import connections
from django.db.models import QuerySet

from .cursors import hot_cursor

_PLACEHOLDER = "\x00turnkit-compiled-{}\x00"
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
        queryset = self._build(*placeholders)
        compiler = queryset.query.get_compiler(using=using)
        sql, params = compiler.as_sql()
        slots: list[int | None] = []
        for param in params:
            if isinstance(param, str) and param in placeholders:
                slots.append(placeholders.index(param))
            elif isinstance(param, str) and "\x00turnkit-compiled-" in param:
                raise ValueError(f"a compiled read's value was transformed ({param!r}): "
                                 "read it through the ORM instead")
            else:
                slots.append(None)
        if sorted(set(s for s in slots if s is not None)) != list(range(self._arity)):
            raise ValueError("a compiled read must use each of its values as a parameter")
        expressions = [column[0] for column in compiler.select]
        converters = sorted(compiler.get_converters(expressions).items())
        constants: Sequence[object] = [None if slot is not None else param
                                       for slot, param in zip(slots, params, strict=True)]
        return sql, tuple(slots), tuple(constants), converters


__all__ = ["CompiledRead"]
