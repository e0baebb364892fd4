"""What every turnkit management command shares: its refusals are CommandErrors.

``manage.py`` prints a ``CommandError`` as one line and exits 1; anything else is a
traceback. So a ``TurnkitError`` (a broken ``TURNKIT`` setting read with ``--skip-checks``, or
under ``call_command``, which skips the checks by default) becomes one, with its own message,
and an id the commands are given is checked before it reaches a query: one with a NUL or a lone
surrogate (what a shell hands Python for bytes that are not UTF-8) names no row, and no
database can even be asked about it.
"""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError

from ..exceptions import TurnkitError
from ..serialization import unstorable


class TurnkitCommand(BaseCommand):
    """A command whose ``TurnkitError`` is a ``CommandError`` with the same message."""

    def execute(self, *args: Any, **options: Any) -> Any:
        try:
            return super().execute(*args, **options)
        except TurnkitError as exc:
            raise CommandError(str(exc)) from exc


def unstorable_id(value: object) -> str | None:
    """Why ``value`` can be no id (it holds a NUL or a lone surrogate), or None."""
    return unstorable(value) if isinstance(value, str) else None


def id_hint(value: object) -> str:
    """`` (it contains a NUL character ...: no id does)`` when ``value`` can be no id, else
    empty: what the "no such id" refusals append."""
    problem = unstorable_id(value)
    return "" if problem is None else f" (it {problem}: no id does)"


__all__ = ["TurnkitCommand", "id_hint", "unstorable_id"]
