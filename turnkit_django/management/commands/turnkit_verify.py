"""Check the invariants of the stored data; exit non-zero on any violation."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

from ...models import Conversation, Turn
from ...testing.verify import verify


class Command(BaseCommand):
    help = ("Check the stored turns, transcripts, deliveries and waits against invariants "
            "I1-I4, I6 and I7; exits non-zero when any is violated.")

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument("--turn", action="append", dest="turns", metavar="TURN_ID",
                            help="Check the conversation holding this turn (repeatable).")
        parser.add_argument("--conversation", action="append", dest="conversations",
                            metavar="CONVERSATION_ID",
                            help="Check this conversation (repeatable).")

    def handle(self, *args: Any, **options: Any) -> None:
        _require_known(Turn, options["turns"], "turn", "turn_...")
        _require_known(Conversation, options["conversations"], "conversation", "conv_...")
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
                   shape: str) -> None:
    """Refuse ids that name no row: checking nothing must not look like a pass."""
    if not ids:
        return
    known = set(model.objects.filter(pk__in=ids).values_list("pk", flat=True))
    unknown = [ident for ident in ids if ident not in known]
    if unknown:
        raise CommandError(
            f"no {what} with id {', '.join(map(repr, unknown))}; nothing was checked. "
            f"{what.capitalize()} ids look like {shape}: copy one from turnkit_inspect or the "
            "admin."
        )
