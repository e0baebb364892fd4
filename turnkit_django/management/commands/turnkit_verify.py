"""Check the invariants of the stored data; exit non-zero on any violation."""

from __future__ import annotations

from argparse import RawDescriptionHelpFormatter
from typing import Any

from django.core.management.base import CommandError, CommandParser, DjangoHelpFormatter

from ...models import Conversation, Turn
from ...testing.verify import INVARIANTS, verify
from ..command import TurnkitCommand, id_hint, unstorable_id


class HelpFormatter(DjangoHelpFormatter, RawDescriptionHelpFormatter):
    """Django's option order, with the description's lines kept (one per invariant)."""


class Command(TurnkitCommand):
    help = ("Check the stored turns, transcripts, deliveries and waits against these\n"
            "invariants; exits non-zero when any is violated.\n\n"
            + "\n".join(f"  {name}  {text}" for name, text in INVARIANTS.items())
            + "\n\n(I5, one side effect per replay-safe tool call, needs the tools' own records:\n"
            "turnkit's end-to-end tests check it.)")

    def create_parser(self, prog_name: str, subcommand: str, **kwargs: Any) -> CommandParser:
        parser = super().create_parser(prog_name, subcommand, **kwargs)
        parser.formatter_class = HelpFormatter
        return parser

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--turn", action="append", dest="turns", metavar="TURN_ID",
                            help="Check the conversation holding this turn (repeatable).")
        parser.add_argument("--conversation", action="append", dest="conversations",
                            metavar="CONVERSATION_ID",
                            help="Check this conversation (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        _require_known(Turn, options["turns"], "turn", "turn_...",
                       ("conv_", "conversation", "--conversation"))
        _require_known(Conversation, options["conversations"], "conversation", "conv_...",
                       ("turn_", "turn", "--turn"))
        report = verify(turn_ids=options["turns"], conversation_ids=options["conversations"])
        for violation in report.violations:
            self.stdout.write(str(violation))
        if report.violations:
            raise CommandError(
                f"{len(report.violations)} invariant violation(s) in {report.conversations} "
                f"conversations, {report.turns} turns checked"
            )
        self.stdout.write(f"ok: {report.conversations} conversations, {report.turns} turns "
                          "checked")


def _require_known(model: type[Turn] | type[Conversation], ids: list[str] | None, what: str,
                   shape: str, other: tuple[str, str, str]) -> None:
    """Refuse ids that name no row: checking nothing must not look like a pass. ``other`` is
    the prefix of the other kind of id, its name and the option that takes it."""
    if not ids:
        return
    # One no database stores names no row, and would fail the query (PostgreSQL, NUL).
    storable = [ident for ident in ids if unstorable_id(ident) is None]
    known = set(model.objects.filter(pk__in=storable).values_list("pk", flat=True))
    unknown = [ident for ident in ids if ident not in known]
    if unknown:
        prefix, kind, flag = other
        named = ", ".join(
            repr(ident) + (id_hint(ident) or (f" (that is a {kind} id: {flag} takes it)"
                                              if isinstance(ident, str)
                                              and ident.startswith(prefix) else ""))
            for ident in unknown)
        raise CommandError(
            f"no {what} with id {named}; nothing was checked. "
            f"{what.capitalize()} ids look like {shape}: copy one from turnkit_inspect or the "
            "admin."
        )
