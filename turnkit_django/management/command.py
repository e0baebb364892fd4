"""What every turnkit management command shares: its refusals are CommandErrors, and what it
writes is safe for a terminal.

``manage.py`` prints a ``CommandError`` as one line and exits 1; anything else is a
traceback. So a ``TurnkitError`` (a broken ``TURNKIT`` setting read with ``--skip-checks``, or
under ``call_command``, which skips the checks by default) becomes one, with its own message,
and an id the commands are given is checked before it reaches a query: one with a NUL or a lone
surrogate (what a shell hands Python for bytes that are not UTF-8) names no row, and no
database can even be asked about it.

The commands print stored text (messages, arguments, results, errors, names) that a model, a
user or a tool wrote: ``stdout`` and ``stderr`` (a ``CommandError`` too, as ``manage.py`` prints
it) write every message through :func:`~turnkit_django.base.terminal.for_terminal`, before any
colour is added, so an escape sequence in it is shown (``\\x1b[2K``), never obeyed.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from typing import Any, TextIO

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from ..base.serialization import unstorable
from ..base.terminal import for_terminal
from ..exceptions import TurnkitError


class TerminalOutput(OutputWrapper):
    """An ``OutputWrapper`` that makes control characters visible before styling a message."""

    def write(self, msg: str = "",  # type: ignore[override]  # as OutputWrapper's stub
              style_func: Callable[[str], str] | None = None, ending: str | None = None) -> None:
        super().write(for_terminal(msg), style_func, ending)


class TurnkitCommand(BaseCommand):
    """A command whose ``TurnkitError`` is a ``CommandError`` with the same message, and whose
    output shows control characters instead of obeying them."""

    def __init__(self, stdout: TextIO | None = None, stderr: TextIO | None = None,
                 no_color: bool = False, force_color: bool = False) -> None:
        super().__init__(stdout, stderr, no_color, force_color)
        self.stdout = TerminalOutput(stdout or sys.stdout)
        self.stderr = TerminalOutput(stderr or sys.stderr)
        if not no_color:
            self.stderr.style_func = self.style.ERROR

    def execute(self, *args: Any, **options: Any) -> Any:
        for name in ("stdout", "stderr"):  # call_command(stdout=...): wrapped the same way
            if options.get(name):
                setattr(self, name, TerminalOutput(options.pop(name)))
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


__all__ = ["TerminalOutput", "TurnkitCommand", "id_hint", "unstorable_id"]
