"""Text for an operator's terminal: control characters made visible, never obeyed.

Stored text (what a model, a user or a tool wrote: messages, arguments, results, errors, names)
can hold escape sequences that a terminal would obey: ``ESC [2K ESC [1A`` erases the line above
(an "outcome unknown" warning), ``ESC ]8;;url`` adds a hyperlink, a bidi override (U+202E)
shows text backwards. :func:`for_terminal` turns each such character into a visible escape
(``\\x1b``, ``\\x9b``, ``\\u202e``) where text is written to a terminal: every ``turnkit_*``
command's output and errors, and ``transcript.show``.

Escaped: the C0 controls but newline and tab (a carriage return or backspace could overwrite a
line too), DEL, the C1 controls (U+0080-U+009F; ``U+009B`` is a one-character CSI) and the bidi
embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069). Other text is left alone: a
backslash is not doubled, so text that already reads ``\\x1b`` stays as written (and does
nothing).
"""

from __future__ import annotations

import re

CONTROLS = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069]")


def _visible(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def _json_escape(match: re.Match[str]) -> str:
    return f"\\u{ord(match.group()):04x}"


def for_terminal(text: str) -> str:
    """``text`` with every control, DEL, C1 and bidi control character as a visible escape."""
    return CONTROLS.sub(_visible, text)


def json_for_terminal(document: str) -> str:
    """A JSON document (from ``json.dumps(..., ensure_ascii=False)``) with those characters as
    ``\\uXXXX`` escapes: still valid JSON that reads back the same, and safe to print. (They can
    only be inside its strings, where JSON allows the escape.)"""
    return CONTROLS.sub(_json_escape, document)


__all__ = ["CONTROLS", "for_terminal", "json_for_terminal"]
