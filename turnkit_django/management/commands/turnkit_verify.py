"""Check the invariants of the stored data; exit non-zero on any violation."""

from __future__ import annotations

from typing import Any

from django.core.management.base import BaseCommand, CommandError, CommandParser

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
