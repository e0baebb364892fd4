"""The numeric options of turnkit's management commands: one argparse type for all of them.

``type=Number(...)`` turns the command line's text into a number within the option's range, or
makes argparse refuse it before the command runs; :meth:`Number.clean` applies the same rule to
a value ``call_command`` passed as a keyword (argparse does not parse optional ones). Both say
it in the same words, ``argument --interval: must be ...; got '0'``: on the command line
argparse prints ``manage.py turnkit_reconcile: error: <that>`` and exits with status 2;
through ``call_command`` (arguments or keywords) it is ``CommandError("Error: <that>")``.
Non-finite values (``nan``, ``inf``, ``1e400``) are never in range; a whole number is written
without a point (``2.0`` is refused, as by argparse's ``int``).

:func:`principal` reads a ``--principal`` option: JSON as every database stores it.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from typing import Any

from django.core.management.base import CommandError

from ..base.serialization import json_value, unstorable
from ..conf import MAX_COUNT, MAX_SECONDS

#: The longest age ``turnkit_prune --older-than`` takes: a century.
MAX_DAYS = 36_500


@dataclass(frozen=True)
class Number:
    """A number from ``minimum`` to ``maximum`` (``minimum`` excluded when ``positive``), of
    ``unit`` if any; whole when ``whole``."""

    minimum: int
    maximum: int
    unit: str = ""
    whole: bool = False
    positive: bool = False

    @property
    def accepted(self) -> str:
        kind = "a whole number" if self.whole else "a number"
        unit = f" of {self.unit}" if self.unit else ""
        low = f"above {self.minimum}" if self.positive else f"from {self.minimum}"
        return f"{kind}{unit} {low} to {self.maximum}"

    def __call__(self, value: object) -> float:
        """The argparse type: ``value`` (text, or a number) as a number in range."""
        number = self._parse(value)
        # Comparisons refuse NaN and infinities too; ints compare exactly, however large.
        low = number is not None and (number > self.minimum if self.positive
                                      else number >= self.minimum)
        if number is None or not low or not number <= self.maximum:
            # The value as text, as argparse (and call_command, for a required option) has it.
            raise argparse.ArgumentTypeError(f"must be {self.accepted}; got {str(value)!r}")
        return number

    def clean(self, flag: str, value: object) -> float | None:
        """``value`` of option ``flag`` in range (None stays None), else the CommandError
        Django's parser raises for the same text from ``call_command`` arguments."""
        if value is None:
            return None
        try:
            return self(value)
        except argparse.ArgumentTypeError as exc:
            raise CommandError(f"Error: argument {flag}: {exc}") from None

    def _parse(self, value: object) -> float | None:
        if isinstance(value, bool) or not isinstance(value, str | int | float):
            return None
        try:
            if not self.whole:
                return float(value)
            if isinstance(value, float):  # from call_command: 2.0 is whole, 2.5 is not
                return int(value) if value.is_integer() else None
            return int(value)
        except (ValueError, OverflowError):
            return None


#: Conversations per transaction (``--batch``) and passes (``--passes``): database integers.
COUNT = Number(1, MAX_COUNT, whole=True)
#: Seconds between passes: positive and at most ten years, as the seconds settings (E003).
SECONDS = Number(0, MAX_SECONDS, "seconds", positive=True)
#: The age of what ``turnkit_prune`` deletes.
DAYS = Number(0, MAX_DAYS, "days")


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is no JSON value")


def principal(text: object) -> Any:
    """The principal a ``--principal`` option gives, as JSON; CommandError for text that is no
    JSON (Python's reader takes ``NaN`` and ``Infinity``, which are not), nests past what it
    reads, or holds what no database stores (a NUL, a lone surrogate). A value that is no text
    (a ``call_command`` keyword) is taken as the JSON value it is."""
    try:
        value = (json.loads(text, parse_constant=_no_constant) if isinstance(text, str)
                 else json_value(text, "it"))
    except (ValueError, TypeError) as exc:
        problem: str | None = str(exc)[:120]
    except RecursionError:
        problem = "it nests too deep"
    else:
        problem = unstorable(value)
        if problem is None:
            return value
        problem = f"it {problem}"
    raise CommandError(f"--principal must be JSON, such as '{{\"user\": 7}}' (the principal "
                       f"your authorization policy is asked about), or left out: {problem}")


__all__ = ["COUNT", "DAYS", "MAX_DAYS", "SECONDS", "Number", "principal"]
